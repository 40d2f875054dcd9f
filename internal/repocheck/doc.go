// Package repocheck holds tests of the repository itself, not of any one
// package: that the README's Layout names every package directory of the
// tree, so that the map a new contributor reads first is not stale.
package repocheck
