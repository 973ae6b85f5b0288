// Package deploy holds no code: its tests check the files that install and run sluice —
// the container image (docker/Dockerfile, ../.dockerignore), the systemd unit
// (systemd/sluice.service) and the Helm chart (helm/sluice) — against the gateway they
// package: its configuration loader, its binary and, when they are installed,
// systemd-analyze, helm and a Docker engine. docs/deploy.md describes the files.
package deploy
