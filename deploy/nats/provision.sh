#!/bin/sh
# provision.sh: creates owed's JetStream streams and consumer, or updates
# them to the settings in this folder (owed.json, owed-dead-letters.json,
# owed-workers.json: the settings docs/queues.md explains). Idempotent: run it
# at every install and upgrade. The Kubernetes Job (deploy/nats/) and the
# compose stack's nats-provision service run it from the nats-box image; by
# hand:
#
#   NATS_URL=nats://127.0.0.1:4222 deploy/nats/provision.sh deploy/nats
#
# It needs the nats CLI and jq, and talks to the JetStream API directly
# ($JS.API.*) with these files as the request bodies, so what the server gets
# is exactly what the files say, whatever the CLI's version knows of the
# newer fields (allow_msg_schedules). NATS_URL, and NATS_CREDS for a
# credentials file, are the CLI's own variables. It waits up to WAIT_SECONDS
# (default 300) for JetStream to answer, so it may start with the servers.
set -eu

dir=${1:-$(dirname "$0")}
wait_seconds=${WAIT_SECONDS:-300}
for tool in nats jq; do
  command -v "$tool" >/dev/null || { echo "provision: $tool is not on PATH (the natsio/nats-box image has both)" >&2; exit 1; }
done

# api SUBJECT BODY: one JetStream API request; prints the JSON answer.
api() { nats request --raw --timeout 10s "$1" "$2"; }

# failed ANSWER: true when ANSWER is not a JSON answer without an error.
failed() { ! printf '%s' "$1" | jq -e 'type == "object" and (has("error") | not)' >/dev/null 2>&1; }

# errcode ANSWER: the answer's JetStream error code, or nothing.
errcode() { printf '%s' "$1" | jq -r '.error.err_code // empty' 2>/dev/null; }

deadline=$(($(date +%s) + wait_seconds))
# $JS.API.INFO answers once this account's JetStream is up; in a cluster,
# once the servers have elected a meta leader.
until answer=$(api '$JS.API.INFO' '' 2>&1) && ! failed "$answer"; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "provision: JetStream at ${NATS_URL:-the default server} did not answer within ${wait_seconds}s: $answer" >&2
    exit 1
  fi
  sleep 2
done

# stream FILE: create the stream FILE describes, or update it when it exists
# with other settings (JetStream error 10058). A create with the same
# settings succeeds and changes nothing.
stream() {
  name=$(jq -r .name "$1")
  config=$(jq -c . "$1")
  answer=$(api "\$JS.API.STREAM.CREATE.$name" "$config") || true
  if failed "$answer" && [ "$(errcode "$answer")" = 10058 ]; then
    answer=$(api "\$JS.API.STREAM.UPDATE.$name" "$config") || true
  fi
  if failed "$answer"; then
    echo "provision: stream $name: $answer" >&2
    exit 1
  fi
  echo "provision: stream $name: $(printf '%s' "$answer" | jq -c '{replicas: .config.num_replicas, messages: .state.messages}')"
}

stream "$dir/owed.json"
stream "$dir/owed-dead-letters.json"

# The durable consumer: CONSUMER.CREATE creates it, or updates the settings
# an existing one may change.
main=$(jq -r .name "$dir/owed.json")
consumer=$(jq -r .durable_name "$dir/owed-workers.json")
body=$(jq -c --arg stream "$main" '{stream_name: $stream, config: .}' "$dir/owed-workers.json")
answer=$(api "\$JS.API.CONSUMER.CREATE.$main.$consumer" "$body") || true
if failed "$answer"; then
  echo "provision: consumer $consumer on $main: $answer" >&2
  exit 1
fi
echo "provision: consumer $consumer on $main: $(printf '%s' "$answer" | jq -c '{ack_wait: .config.ack_wait, max_deliver: .config.max_deliver, pending: .num_pending}')"
