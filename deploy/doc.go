// Package deploy holds owed's production wiring (the Dockerfile, the compose
// stack, Kubernetes manifests, Prometheus alerts and the Grafana dashboard)
// and the tests that keep it honest: every OWED_* variable a manifest sets
// must exist in a service's configuration, and the Dockerfile's build command
// must build. It has no Go code of its own and must never grow any that the
// services import.
package deploy
