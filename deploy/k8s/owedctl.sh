#!/bin/sh
# owedctl.sh: runs one owedctl command in the cluster, as a pod that goes
# away when it ends, with the workers' queue and database settings, so it
# talks to whichever queue the install runs on:
#
#   deploy/k8s/owedctl.sh queue stats
#   deploy/k8s/owedctl.sh dlq list --limit 20
#
# It copies from the owed-worker Deployment only what owedctl needs: the
# ServiceAccount (the sqs overlay's IAM role), the security context, the
# envFrom ConfigMaps (owed-config, owed-queue) and the OWED_DATABASE_URL,
# OWED_QUEUE_*, OWED_SQS_* and OWED_NATS_* variables; the image is the
# workers' release of owedctl. Needs kubectl and jq; NAMESPACE selects the
# namespace (default: the context's).
set -eu
[ $# -gt 0 ] || { echo "usage: $0 OWEDCTL-ARGS..." >&2; exit 2; }
ns=${NAMESPACE:+--namespace=$NAMESPACE}
# shellcheck disable=SC2086 # $ns is one word or none
worker=$(kubectl get deployment owed-worker $ns -o json)
image=$(printf '%s' "$worker" | jq -r '.spec.template.spec.containers[0].image | sub("owed-worker"; "owed-owedctl")')
args='[]'
for a in "$@"; do args=$(printf '%s' "$args" | jq -c --arg a "$a" '. + [$a]'); done
overrides=$(printf '%s' "$worker" | jq -c --arg image "$image" --argjson args "$args" '
  .spec.template.spec as $pod | {apiVersion: "v1", spec: {
    serviceAccountName: $pod.serviceAccountName,
    securityContext: $pod.securityContext,
    restartPolicy: "Never",
    containers: [$pod.containers[0] | {
      name: "owedctl", image: $image, args: $args, stdin: true,
      env: [.env[] | select(.name | test("^OWED_(DATABASE_URL|QUEUE_|SQS_|NATS_)"))],
      envFrom: .envFrom,
      resources: {requests: {cpu: "10m", memory: "32Mi"}, limits: {memory: "128Mi"}},
      securityContext: .securityContext}]}}')
# part-of=owed lets the pod through deploy/nats's NetworkPolicy.
# shellcheck disable=SC2086
exec kubectl run "owedctl-$(date +%s)" $ns --rm -i --quiet --restart=Never \
  --image="$image" --labels=app.kubernetes.io/part-of=owed --overrides="$overrides"
