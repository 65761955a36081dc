// Package remote is an MCM driver.Driver that calls a server of the out-of-tree driver protocol
// (proto/mcm/driver/v1/driver.proto): MCM's own machine controller, or any Go code written against MCM's driver
// interface, can use a driver written in any language (or cluster-api-provider-mcm's in-memory cloud).
//
// Errors come back as MCM machine-codes statuses (machinecodes/status), with the code that the trailer
// mcm-machine-code names, else the gRPC code.
package remote

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/driverpb"
	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/internal/endpoint"
	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/internal/wire"
)

// Client is the driver.Driver that New returns; Close releases its connection.
type Client struct {
	conn   *grpc.ClientConn
	client driverpb.DriverClient
}

var _ driver.Driver = (*Client)(nil)

// New returns a driver that calls the protocol server at endpoint (unix:///path, http://127.0.0.1:PORT,
// tcp://127.0.0.1:PORT or 127.0.0.1:PORT). It does not connect yet: a server that is not up makes calls fail
// with Unavailable, which MCM retries, and the connection is re-established when it comes (back).
func New(endpointStr string) (driver.Driver, error) {
	return Dial(endpointStr)
}

// Dial is New returning the concrete *Client (for Close).
func Dial(endpointStr string) (*Client, error) {
	ep, err := endpoint.Parse(endpointStr)
	if err != nil {
		return nil, err
	}
	// passthrough plus our own dialer: the same path for both networks, and no name resolution. The authority
	// is a plain host name: a socket path is not a valid HTTP/2 :authority for strict servers.
	conn, err := grpc.NewClient("passthrough:///driver",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ep.Dial(ctx) }),
	)
	if err != nil {
		return nil, fmt.Errorf("driver endpoint %s: %w", ep, err)
	}
	return &Client{conn: conn, client: driverpb.NewDriverClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// CreateMachine implements driver.Driver.
func (c *Client) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	preq, err := toMachineRequest(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	var trailer metadata.MD
	r, err := c.client.CreateMachine(ctx, preq, grpc.Trailer(&trailer))
	if err != nil {
		return nil, fromGRPC(err, trailer)
	}
	return &driver.CreateMachineResponse{
		ProviderID: r.GetProviderId(), NodeName: r.GetNodeName(), LastKnownState: r.GetLastKnownState(), Addresses: fromAddresses(r.GetAddresses()),
	}, nil
}

// InitializeMachine implements driver.Driver.
func (c *Client) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	preq, err := toMachineRequest(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	var trailer metadata.MD
	r, err := c.client.InitializeMachine(ctx, preq, grpc.Trailer(&trailer))
	if err != nil {
		return nil, fromGRPC(err, trailer)
	}
	return &driver.InitializeMachineResponse{ProviderID: r.GetProviderId(), NodeName: r.GetNodeName(), Addresses: fromAddresses(r.GetAddresses())}, nil
}

// DeleteMachine implements driver.Driver.
func (c *Client) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	preq, err := toMachineRequest(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	var trailer metadata.MD
	r, err := c.client.DeleteMachine(ctx, preq, grpc.Trailer(&trailer))
	if err != nil {
		return nil, fromGRPC(err, trailer)
	}
	return &driver.DeleteMachineResponse{LastKnownState: r.GetLastKnownState()}, nil
}

// GetMachineStatus implements driver.Driver.
func (c *Client) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	preq, err := toMachineRequest(req.Machine, req.MachineClass, req.Secret)
	if err != nil {
		return nil, err
	}
	var trailer metadata.MD
	r, err := c.client.GetMachineStatus(ctx, preq, grpc.Trailer(&trailer))
	if err != nil {
		// Never nil: on Uninitialized, MCM's machine controller reads the response's NodeName and ProviderID
		// (in-process drivers return both) and would dereference a nil one. A server sends them as the
		// status's detail (driver.proto); without one they are empty.
		return fromStatusResponse(statusDetail(err)), fromGRPC(err, trailer)
	}
	return fromStatusResponse(r), nil
}

// statusDetail is the GetMachineStatusResponse an error status carries, if any.
func statusDetail(err error) *driverpb.GetMachineStatusResponse {
	for _, detail := range grpcstatus.Convert(err).Details() {
		if r, ok := detail.(*driverpb.GetMachineStatusResponse); ok {
			return r
		}
	}
	return nil
}

func fromStatusResponse(r *driverpb.GetMachineStatusResponse) *driver.GetMachineStatusResponse {
	return &driver.GetMachineStatusResponse{ProviderID: r.GetProviderId(), NodeName: r.GetNodeName(), Addresses: fromAddresses(r.GetAddresses())}
}

// ListMachines implements driver.Driver.
func (c *Client) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	class, err := toClass(req.MachineClass)
	if err != nil {
		return nil, err
	}
	var trailer metadata.MD
	r, err := c.client.ListMachines(ctx, &driverpb.ListMachinesRequest{MachineClass: class, SecretData: toSecretData(req.Secret)}, grpc.Trailer(&trailer))
	if err != nil {
		return nil, fromGRPC(err, trailer)
	}
	list := r.GetMachines()
	if list == nil {
		list = map[string]string{}
	}
	return &driver.ListMachinesResponse{MachineList: list}, nil
}

// GetVolumeIDs implements driver.Driver.
func (c *Client) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	specs, err := toPVSpecs(req.PVSpecs)
	if err != nil {
		return nil, err
	}
	var trailer metadata.MD
	r, err := c.client.GetVolumeIDs(ctx, &driverpb.GetVolumeIDsRequest{PvSpecsJson: specs}, grpc.Trailer(&trailer))
	if err != nil {
		return nil, fromGRPC(err, trailer)
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: r.GetVolumeIds()}, nil
}

// fromGRPC is the MCM status of a failed call: the code the trailer names, else the gRPC code (above 17, or
// OK, it is Unknown). Transport failures (server down) have no trailer and come as Unavailable, which MCM retries.
func fromGRPC(err error, trailer metadata.MD) error {
	st := grpcstatus.Convert(err)
	code := codes.Code(st.Code())
	if code > wire.MaxCode || code == codes.OK {
		code = codes.Unknown
	}
	if names := trailer.Get(wire.TrailerKey); len(names) > 0 {
		if c, ok := wire.CodeFromName(names[0]); ok && c != codes.OK {
			code = c
		}
	}
	return status.Error(code, balanceBrackets(st.Message()))
}

// balanceBrackets keeps MCM able to read the code back. MCM's status.FromError does not look at the *Status
// it is given but parses its text, "machine codes error: code = [Name] message = [text]", by matching
// brackets: a message with unbalanced brackets would turn the code into Unknown (or cut the message). Such a
// message gets its brackets replaced with parentheses; balanced ones are kept as they are.
func balanceBrackets(msg string) string {
	depth := 0
	for _, r := range msg {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		}
		if depth < 0 {
			break
		}
	}
	if depth == 0 {
		return msg
	}
	return strings.NewReplacer("[", "(", "]", ")").Replace(msg)
}
