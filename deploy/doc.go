// Package deploy holds counterd's deployment and observability files
// (Prometheus alert rules, the Grafana dashboard, Kubernetes manifests,
// the systemd unit) and the tests that check them; it has no code.
package deploy
