// The console's copy buttons: <button data-copy="ID"> copies the text of element ID.
// A static file (the Content-Security-Policy forbids inline script); nothing else runs here.
(function () {
  "use strict";
  function copied(button, ok) {
    var state = document.getElementById(button.getAttribute("aria-describedby") || "");
    if (state) { state.textContent = ok ? "Copied." : "Select the key and copy it by hand."; }
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button[data-copy]") : null;
    if (!button) { return; }
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) { return; }
    var text = source.textContent;
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { copied(button, true); },
        function () { copied(button, false); });
    } else {
      copied(button, false);
    }
  });
}());
