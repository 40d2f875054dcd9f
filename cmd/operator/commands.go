//go:build !runonly

package main

import "io"

// toolCommands are the commands of the full build besides run and version,
// by name; toolNames lists the same names.
var toolCommands = map[string]func(args []string, stdout, stderr io.Writer) error{
	"dev":      runDev,
	"invoke":   runInvoke,
	"test":     runTest,
	"init":     runInit,
	"generate": runGenerate,
	"rbac":     runRBAC,
	"push":     runPush,
	"pull":     runPull,
	"record":   runRecord,
	"replay":   runReplay,
}

// buildNote ends the usage text; the full build has every command.
const buildNote = ""
