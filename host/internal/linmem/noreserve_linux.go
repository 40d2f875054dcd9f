package linmem

import "syscall"

const mapNoReserve = syscall.MAP_NORESERVE
