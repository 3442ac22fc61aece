"""The network service: IPAM, networks, subnets, ports, routers, floating IPs and security groups."""
