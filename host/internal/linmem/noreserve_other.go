//go:build unix && !linux

package linmem

const mapNoReserve = 0
