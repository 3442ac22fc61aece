"""Persistence: tables, engines, transactions and migrations."""
