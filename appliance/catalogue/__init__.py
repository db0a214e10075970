"""Toolkits and tools: conversion from sources (pure) and the catalogue store."""
