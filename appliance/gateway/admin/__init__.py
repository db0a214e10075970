"""Admin operations, one home for every face (the admin API, the CLI, the console to come).

Each operation takes the runtime and the acting principal (``OPERATOR`` for the CLI run by
whoever owns the data directory), checks who may do it, validates its input, writes through
the rooms in one transaction and raises one ApplianceError per fault. The faces only parse
their input (JSON bodies, command-line options) and render the answer, so the API and the
CLI give the same answer and the same error for the same operation.

``people`` (users, agents), ``keys``, ``projects``, ``grants`` (grants and toolkit access),
``ledger`` (quotas, credit). Field names in errors are the API's.
"""
