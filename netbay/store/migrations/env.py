"""Alembic environment: migrations run against netbay's own metadata."""

from alembic import context
from sqlalchemy import create_engine

from netbay.store.models import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")


def run() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(connection=connectable, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run()
