"""Load-balancer providers' realizers beside the nftables one (``netbay.dataplane.loadbalancer``)."""
