"""Container runtimes on netbay ports.

:mod:`netbay.runtime.attach` is the seam every runtime uses (Docker's libnetwork
plugin in :mod:`netbay.plugins.libnetwork`, the container API): it plugs a port
into the fabric and hands back the interface the runtime moves into its container.
"""
