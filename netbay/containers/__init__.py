"""Containers on cloud networks: the rules behind the Zun-compatible container API.

:mod:`networks` turns netbay networks into container networks, :mod:`containers`
keeps containers, their ports and their network attachments (one transaction per
call), :mod:`runner` drives Docker off the request path through
:mod:`netbay.runtime.docker` and reports Zun's statuses back (its create job is
:mod:`creation`'s).
"""
