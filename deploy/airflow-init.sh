#!/usr/bin/env bash
# Runs once before Airflow's components start (the compose service airflow-init):
#   1. the secrets every component must share, generated on first start and kept on the
#      airflow-secrets volume (each component reads them with AIRFLOW__..._CMD=cat ...):
#      the JWT secret the scheduler signs task tokens with and the API server checks, the
#      API's session secret key, and the Fernet key that encrypts connections in the DB;
#   2. the metadata DB schema (`airflow db migrate`: creates or upgrades it).
set -euo pipefail

secrets=${FERRY_AIRFLOW_SECRETS:-/opt/airflow/secrets}
umask 077

write_once() {  # file, python expression printing the value (no newline: _CMD keeps it)
  if [ ! -s "$secrets/$1" ]; then
    python -c "import sys; sys.stdout.write($2)" > "$secrets/$1.partial"
    mv "$secrets/$1.partial" "$secrets/$1"
    echo "airflow-init: generated $secrets/$1"
  fi
}

write_once jwt_secret "__import__('secrets').token_urlsafe(64)"
write_once api_secret_key "__import__('secrets').token_urlsafe(64)"
write_once fernet_key "__import__('cryptography.fernet').fernet.Fernet.generate_key().decode()"

airflow db migrate
echo "airflow-init: metadata DB ready"
