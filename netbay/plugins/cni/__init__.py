"""The CNI plugin: ``netbay-cni`` (:mod:`.client`, forked per call) and the daemon it
hands each call to (:mod:`.server`, :mod:`.service`). Keep this file empty of imports:
the executable imports the package on every call."""
