"""netbay.cli"""
