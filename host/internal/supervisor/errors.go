package supervisor

import (
	"fmt"
)

// FetchError reports that a module's bytes could not be fetched.
type FetchError struct {
	Module, Source string
	Err            error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("module[%s] fetching %s: %v", e.Module, e.Source, e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }

// DigestMismatchError reports bytes that do not match their pinned digest.
type DigestMismatchError struct {
	Module, Source, Want, Got string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("module[%s] from %s: bytes have %s but the source pins %s; update the pinned sha256 if the new bytes are intended, or fix the source",
		e.Module, e.Source, e.Got, e.Want)
}

// NameConflictError reports a module declared by two owners (two files, or
// a file and a ReconcileModule).
type NameConflictError struct {
	Module, Source, Owner string
}

func (e *NameConflictError) Error() string {
	return fmt.Sprintf("module[%s] from %s: a module of that name already runs from %s; rename one of them",
		e.Module, e.Source, e.Owner)
}

// NameMismatchError reports a module whose manifest names it differently
// from its Spec.
type NameMismatchError struct {
	Module, Source, Manifest string
}

// KindConflictError reports a module whose reconciled kind another module
// of the operator already reconciles: two modules of one kind would write
// the same objects' status, and each would see the other's children.
type KindConflictError struct {
	Module, Group, Kind string
	Other, Owner        string // the module already reconciling the kind, and what declares it
}

func (e *KindConflictError) Error() string {
	gk := e.Kind
	if e.Group != "" {
		gk += "." + e.Group
	}
	return fmt.Sprintf("module[%s]: %s is already reconciled by module %s (declared by %s); one kind has one module: remove one, or merge their logic", e.Module, gk, e.Other, e.Owner)
}

func (e *NameMismatchError) Error() string {
	return fmt.Sprintf("module[%s] from %s: the module's manifest names it %q; the names must match (a ReconcileModule is named after its module; a file keeps the module it first loaded, so remove it and add the new one)",
		e.Module, e.Source, e.Manifest)
}
