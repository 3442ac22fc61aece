"""Security groups' parts; :mod:`netbay.dataplane.secgroups` (the realizer) puts them together."""
