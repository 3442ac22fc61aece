"""A router namespace's parts; :mod:`netbay.dataplane.router` puts them together."""
