#!/usr/bin/env bash
# Regenerate the initial migration from the models (only while nothing has been released).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -f netbay/store/migrations/versions/0001_initial_schema.py
db=$(mktemp -u /tmp/nb-regen-XXXX.db)
python -c "
from alembic import command
from netbay.store.migrate import config
command.revision(config('sqlite:///$db'), message='initial schema', autogenerate=True, rev_id='0001')
" >/dev/null
rm -f "$db"
echo "regenerated netbay/store/migrations/versions/0001_initial_schema.py"
