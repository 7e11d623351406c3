// Package deploy holds owed's production wiring (the Dockerfile, the compose
// stacks, the Kubernetes kustomizations, the JetStream cluster, Prometheus
// alerts and the Grafana dashboard) and the tests that keep it honest: every
// OWED_* variable a manifest sets must exist in a service's configuration,
// every queue client must be configured for exactly one backend, the NATS
// manifests must agree with their configuration and with the jetstream
// backend's own provisioning, and the Dockerfile's build command must build.
// It has no Go code of its own and must never grow any that the services
// import.
package deploy
