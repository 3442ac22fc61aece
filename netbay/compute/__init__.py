"""The little of Nova netbay serves: SSH keypairs, which Magnum's templates name."""
