// Package tests holds duet's end-to-end tests: they build the duet binary,
// start real processes (duet serve, duet launch, duet sim) on free loopback
// ports, talk HTTP to them, and clean up every process and file they made.
package tests
