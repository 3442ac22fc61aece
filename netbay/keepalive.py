"""How long an idle kept-alive HTTP connection lives between netbay's clients and servers.

The client must be the one to close it. A server that closes an idle connection just as
a client reuses it resets a request the client cannot tell was never read, and a POST
cannot be resent blindly (uvicorn's default closes after 5 s, httpx's pool keeps a
connection 5 s, urllib3's for ever: a cluster step after a pause met exactly that reset).
So netbay's servers keep an idle connection :data:`SERVER` seconds and its clients
(:mod:`netbay.client`) drop theirs after :data:`CLIENT`, well before.
"""

SERVER = 75   # nginx's default keepalive_timeout
CLIENT = 30
