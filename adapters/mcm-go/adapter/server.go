// Package adapter serves the out-of-tree driver protocol (proto/mcm/driver/v1/driver.proto) from any Machine
// Controller Manager driver: a value implementing MCM's driver.Driver. A provider's main.go can be as short as
//
//	func main() { adapter.Main(mydriver.New()) }
//
// and then runs as `provider --listen unix:///run/mcm/driver.sock` (or with MCM_DRIVER_LISTEN set).
package adapter

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	"google.golang.org/grpc"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/driverpb"
	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/internal/endpoint"
)

// NewServer serves the protocol's calls from d. Register it on a grpc.Server of your own, or use Serve.
func NewServer(d driver.Driver) driverpb.DriverServer {
	return &server{d: d}
}

type server struct {
	driverpb.UnimplementedDriverServer
	d driver.Driver
}

func (s *server) CreateMachine(ctx context.Context, req *driverpb.MachineRequest) (*driverpb.CreateMachineResponse, error) {
	return call(ctx, "CreateMachine", func() (*driverpb.CreateMachineResponse, error) {
		o, err := fromMachineRequest(req)
		if err != nil {
			return nil, err
		}
		r, err := s.d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
		if err != nil {
			return nil, err
		}
		if r == nil {
			return nil, nilResponse("CreateMachine")
		}
		return &driverpb.CreateMachineResponse{
			ProviderId: r.ProviderID, NodeName: r.NodeName, LastKnownState: r.LastKnownState, Addresses: toAddresses(r.Addresses),
		}, nil
	})
}

func (s *server) InitializeMachine(ctx context.Context, req *driverpb.MachineRequest) (*driverpb.InitializeMachineResponse, error) {
	return call(ctx, "InitializeMachine", func() (*driverpb.InitializeMachineResponse, error) {
		o, err := fromMachineRequest(req)
		if err != nil {
			return nil, err
		}
		r, err := s.d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
		if err != nil {
			return nil, err
		}
		if r == nil {
			return nil, nilResponse("InitializeMachine")
		}
		return &driverpb.InitializeMachineResponse{ProviderId: r.ProviderID, NodeName: r.NodeName, Addresses: toAddresses(r.Addresses)}, nil
	})
}

func (s *server) DeleteMachine(ctx context.Context, req *driverpb.MachineRequest) (*driverpb.DeleteMachineResponse, error) {
	return call(ctx, "DeleteMachine", func() (*driverpb.DeleteMachineResponse, error) {
		o, err := fromMachineRequest(req)
		if err != nil {
			return nil, err
		}
		r, err := s.d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
		if err != nil {
			return nil, err
		}
		if r == nil {
			return &driverpb.DeleteMachineResponse{}, nil
		}
		return &driverpb.DeleteMachineResponse{LastKnownState: r.LastKnownState}, nil
	})
}

func (s *server) GetMachineStatus(ctx context.Context, req *driverpb.MachineRequest) (*driverpb.GetMachineStatusResponse, error) {
	return call(ctx, "GetMachineStatus", func() (*driverpb.GetMachineStatusResponse, error) {
		o, err := fromMachineRequest(req)
		if err != nil {
			return nil, err
		}
		r, err := s.d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: o.machine, MachineClass: o.class, Secret: o.secret})
		if err != nil {
			if r != nil && (r.ProviderID != "" || r.NodeName != "") {
				return nil, errWithResponse{error: err, response: toStatusResponse(r)}
			}
			return nil, err
		}
		if r == nil {
			return nil, nilResponse("GetMachineStatus")
		}
		return toStatusResponse(r), nil
	})
}

func (s *server) ListMachines(ctx context.Context, req *driverpb.ListMachinesRequest) (*driverpb.ListMachinesResponse, error) {
	return call(ctx, "ListMachines", func() (*driverpb.ListMachinesResponse, error) {
		class, err := fromClass(req.GetMachineClass(), "")
		if err != nil {
			return nil, err
		}
		r, err := s.d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: toSecret(req.GetSecretData(), class)})
		if err != nil {
			return nil, err
		}
		if r == nil {
			return &driverpb.ListMachinesResponse{}, nil
		}
		return &driverpb.ListMachinesResponse{Machines: r.MachineList}, nil
	})
}

func (s *server) GetVolumeIDs(ctx context.Context, req *driverpb.GetVolumeIDsRequest) (*driverpb.GetVolumeIDsResponse, error) {
	return call(ctx, "GetVolumeIDs", func() (*driverpb.GetVolumeIDsResponse, error) {
		specs, err := fromPVSpecs(req.GetPvSpecsJson())
		if err != nil {
			return nil, err
		}
		r, err := s.d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: specs})
		if err != nil {
			return nil, err
		}
		if r == nil {
			return &driverpb.GetVolumeIDsResponse{}, nil
		}
		return &driverpb.GetVolumeIDsResponse{VolumeIds: r.VolumeIDs}, nil
	})
}

// A nil response without an error, where the caller needs a provider ID, is a driver bug.
func nilResponse(method string) error {
	return status.Error(codes.Internal, fmt.Sprintf("the driver's %s returned neither a response nor an error", method))
}

// stopGrace is how long Serve lets running calls finish after ctx is done.
const stopGrace = 10 * time.Second

// Serve serves d on endpoint (unix:///path, or loopback TCP: http://127.0.0.1:PORT, tcp://127.0.0.1:PORT or
// 127.0.0.1:PORT) until ctx is done, then lets running calls finish (for up to 10 s) and returns nil. A socket
// file left by a server that is gone is replaced; the socket is removed on return.
func Serve(ctx context.Context, endpointStr string, d driver.Driver) error {
	ep, err := endpoint.Parse(endpointStr)
	if err != nil {
		return err
	}
	lis, err := endpoint.Listen(ep)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", ep, err)
	}
	return serve(ctx, lis, ep.String(), d)
}

func serve(ctx context.Context, lis net.Listener, name string, d driver.Driver) error {
	srv := grpc.NewServer()
	driverpb.RegisterDriverServer(srv, NewServer(d))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	log.Printf("mcm driver adapter: serving the driver protocol on %s", name)
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("serving on %s: %w", name, err)
		}
		return nil
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		srv.Stop()
		<-stopped
	}
	<-done
	log.Printf("mcm driver adapter: stopped serving on %s", name)
	return nil
}

func toStatusResponse(r *driver.GetMachineStatusResponse) *driverpb.GetMachineStatusResponse {
	return &driverpb.GetMachineStatusResponse{ProviderId: r.ProviderID, NodeName: r.NodeName, Addresses: toAddresses(r.Addresses)}
}
