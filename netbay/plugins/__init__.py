"""Plugins other software loads to use netbay (Docker's libnetwork remote driver)."""
