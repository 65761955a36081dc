// Package wire holds what the adapter and the remote client share about errors on the wire.
package wire

import "github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"

// TrailerKey is the trailer that names the machine code of every failed call (proto/mcm/driver/v1/driver.proto).
const TrailerKey = "mcm-machine-code"

// MaxCode is the highest machine code, Uninitialized.
const MaxCode = codes.Uninitialized

// CodeFromName is the machine code a trailer names, by MCM's own names ("ResourceExhausted", "Uninitialized").
func CodeFromName(name string) (codes.Code, bool) {
	// codes.StringToCode answers Unknown for any name it does not know; tell that apart from "Unknown".
	c := codes.StringToCode(name)
	if c.String() != name {
		return codes.Unknown, false
	}
	return c, true
}
