"""Container infrastructure (Magnum semantics): network drivers, cluster templates, clusters.

The driver registry (``drivers``) is the one source of truth about which network
driver serves which COE and which labels it reads; API validation, the
``/v1/network-drivers`` answer and ``docs/network-drivers.md`` are derived from it.
Services here know nothing of HTTP; ``netbay.api.containerinfra`` serves them.
"""
