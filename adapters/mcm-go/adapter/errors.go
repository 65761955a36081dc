package adapter

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime/debug"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/driverpb"
	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/internal/wire"
)

// machineCode reads a driver's error as MCM's machine controller does: with machinecodes' status.FromError,
// which also decodes a status that was wrapped (fmt.Errorf("…: %w", status.Error(…))) or re-created from its
// text, since it parses the "code = [Name] message = [text]" form of the error's string.
//
// An error that is not a machine-codes status is Unknown, with the error's text as message. That is what MCM
// itself makes of it: status.FromError returns code Unknown and the error's text (with ok = false), the machine
// controller records that code as the machine's lastOperation.errorCode (machineCreateErrorHandler) and otherwise
// retries as it does for Unknown. Internal would claim a driver bug that we cannot know of, and would make
// the client retry less eagerly than MCM does for the same driver in-process. A code of OK on an error (a
// driver bug: the call failed without saying why) is Unknown too, since gRPC cannot fail a call with OK.
func machineCode(err error) (codes.Code, string) {
	st, _ := status.FromError(err)
	code, msg := st.Code(), st.Message()
	if code == codes.OK || code > wire.MaxCode {
		code = codes.Unknown
	}
	return code, msg
}

// toGRPC turns a driver's error into the call's gRPC status: the machine code's number as the gRPC code (17,
// Uninitialized, goes on the wire as grpc-status 17: grpc-go sends any number) and, always, the code's name in
// the trailer, which clients read first (driver.proto's header says why).
func toGRPC(ctx context.Context, err error) error {
	code, msg := machineCode(err)
	// SetTrailer fails only outside a gRPC handler (a test calling the DriverServer directly).
	_ = grpc.SetTrailer(ctx, metadata.Pairs(wire.TrailerKey, code.String()))
	st := grpcstatus.New(grpccodes.Code(code), msg)
	var answered errWithResponse
	if errors.As(err, &answered) {
		if detailed, derr := st.WithDetails(answered.response); derr == nil {
			st = detailed
		}
	}
	return st.Err()
}

// errWithResponse is a driver error that came with a response (MCM's GetMachineStatus answers Uninitialized
// with the VM's providerID and node name): the response travels as the status's detail (driver.proto).
type errWithResponse struct {
	error
	response *driverpb.GetMachineStatusResponse
}

func (e errWithResponse) Unwrap() error { return e.error }

// call runs one driver call: a driver error becomes the protocol's status and a panic becomes Internal, so one
// bad call does not take down the server (and every other machine's calls with it). Only the method and the
// stack are logged: a panic value or a request may hold secret data.
func call[T any](ctx context.Context, method string, f func() (T, error)) (resp T, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Printf("mcm driver adapter: the driver panicked in %s (value not logged: it may hold secrets)\n%s", method, debug.Stack())
			var zero T
			resp, err = zero, toGRPC(ctx, status.Error(codes.Internal, fmt.Sprintf("the driver panicked in %s", method)))
		}
	}()
	resp, err = f()
	if err != nil {
		var zero T
		return zero, toGRPC(ctx, err)
	}
	return resp, nil
}
