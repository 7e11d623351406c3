// Package check holds the checks of deploy/ that need Kubernetes' own
// libraries: it renders every kustomization with sigs.k8s.io/kustomize/api
// (what `kubectl kustomize` runs), decodes every object strictly with the
// k8s.io/api types, and evaluates every pod template against the Pod
// Security "restricted" standard with k8s.io/pod-security-admission. It is
// a module of its own so owed's go.mod does not carry those libraries;
// scripts/test.sh runs its tests, and deploy/'s own tests render through
// its render command (Render).
package check
