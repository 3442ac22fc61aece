"""Identity: projects, users, roles and signed tokens (a Keystone v3 subset)."""
