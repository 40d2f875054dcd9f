//go:build runonly

package main

import "io"

// toolCommands is empty in the run build: it has only run and version
// (toolNames).
var toolCommands = map[string]func(args []string, stdout, stderr io.Writer) error{}

// buildNote ends the usage text of the run build.
const buildNote = `
This is the run build (-tags runonly), as the image ships it: only run and
version. The other commands are in the full build (make operator).
`
