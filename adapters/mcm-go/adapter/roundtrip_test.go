package adapter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/adapter"
	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/driverpb"
	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/remote"
)

// fakeDriver records the requests it gets and answers what a test set (err, or else the responses).
type fakeDriver struct {
	mu       sync.Mutex
	err      error
	panicMsg string
	requests []any

	create    *driver.CreateMachineResponse
	init      *driver.InitializeMachineResponse
	del       *driver.DeleteMachineResponse
	getStatus *driver.GetMachineStatusResponse
	list      *driver.ListMachinesResponse
	volumes   *driver.GetVolumeIDsResponse
}

func (f *fakeDriver) record(req any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if f.panicMsg != "" {
		panic(f.panicMsg)
	}
	return f.err
}

func (f *fakeDriver) set(fn func(f *fakeDriver)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeDriver) last(t *testing.T) any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		t.Fatal("the driver got no request")
	}
	return f.requests[len(f.requests)-1]
}

func (f *fakeDriver) CreateMachine(_ context.Context, r *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return f.create, nil
}

func (f *fakeDriver) InitializeMachine(_ context.Context, r *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return f.init, nil
}

func (f *fakeDriver) DeleteMachine(_ context.Context, r *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return f.del, nil
}

func (f *fakeDriver) GetMachineStatus(_ context.Context, r *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	if err := f.record(r); err != nil {
		// As MCM's drivers answer Uninitialized: the error and the VM's identity together.
		if st, _ := status.FromError(err); st.Code() == codes.Uninitialized {
			return f.getStatus, err
		}
		return nil, err
	}
	return f.getStatus, nil
}

func (f *fakeDriver) ListMachines(_ context.Context, r *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return f.list, nil
}

func (f *fakeDriver) GetVolumeIDs(_ context.Context, r *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	if err := f.record(r); err != nil {
		return nil, err
	}
	return f.volumes, nil
}

// serve runs adapter.Serve for d on endpoint until the test ends, and waits until it answers.
func serve(t *testing.T, endpoint string, d driver.Driver) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- adapter.Serve(ctx, endpoint, d) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	waitForServer(t, endpoint)
}

func waitForServer(t *testing.T, endpoint string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A fresh client each time: a used one waits out gRPC's reconnect backoff (a second) after a refusal.
		d, err := remote.Dial(endpoint)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{})
		cancel()
		_ = d.Close()
		if st, _ := status.FromError(err); err == nil || (st.Code() != codes.Unavailable && st.Code() != codes.DeadlineExceeded) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server on %s did not come up: %v", endpoint, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// socket is a unix:// endpoint in a fresh directory (short: socket paths are limited to 108 bytes).
func socket(t *testing.T) (endpoint, path string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcmgo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path = filepath.Join(dir, "d.sock")
	return "unix://" + path, path
}

// rawClient talks the protocol directly, to see what goes on the wire.
func rawClient(t *testing.T, endpoint string) driverpb.DriverClient {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return driverpb.NewDriverClient(conn)
}

func remoteDriver(t *testing.T, endpoint string) driver.Driver {
	t.Helper()
	d, err := remote.Dial(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func newFake() *fakeDriver {
	return &fakeDriver{
		create:    &driver.CreateMachineResponse{},
		init:      &driver.InitializeMachineResponse{},
		del:       &driver.DeleteMachineResponse{},
		getStatus: &driver.GetMachineStatusResponse{},
		list:      &driver.ListMachinesResponse{},
		volumes:   &driver.GetVolumeIDsResponse{},
	}
}

func setup(t *testing.T) (*fakeDriver, driver.Driver, driverpb.DriverClient) {
	t.Helper()
	f := newFake()
	endpoint, _ := socket(t)
	serve(t, endpoint, f)
	f.set(func(f *fakeDriver) { f.requests = nil }) // waitForServer's call
	return f, remoteDriver(t, endpoint), rawClient(t, endpoint)
}

var allCodes = []codes.Code{
	codes.Canceled, codes.Unknown, codes.InvalidArgument, codes.DeadlineExceeded, codes.NotFound,
	codes.AlreadyExists, codes.PermissionDenied, codes.ResourceExhausted, codes.FailedPrecondition, codes.Aborted,
	codes.OutOfRange, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss, codes.Unauthenticated,
	codes.Uninitialized,
}

// callAll makes each of the six calls through an MCM driver.Driver and returns their errors by method.
func callAll(ctx context.Context, d driver.Driver) map[string]error {
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
	c := &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	s := &corev1.Secret{}
	errs := map[string]error{}
	_, errs["CreateMachine"] = d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: m, MachineClass: c, Secret: s})
	_, errs["InitializeMachine"] = d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: m, MachineClass: c, Secret: s})
	_, errs["DeleteMachine"] = d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: m, MachineClass: c, Secret: s})
	_, errs["GetMachineStatus"] = d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: s})
	_, errs["ListMachines"] = d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: c, Secret: s})
	_, errs["GetVolumeIDs"] = d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{})
	return errs
}

// Every machine code a driver returns comes back from remote as that code, on each of the six calls, and reads
// back as that code with MCM's own status.FromError (which parses the error's text).
func TestEveryMachineCodeRoundTrips(t *testing.T) {
	f, d, _ := setup(t)
	ctx := context.Background()
	for _, code := range allCodes {
		msg := fmt.Sprintf("cloud says %s [quota: 3]", code)
		f.set(func(f *fakeDriver) { f.err = status.Error(code, msg) })
		for method, err := range callAll(ctx, d) {
			if err == nil {
				t.Fatalf("%s with %s: no error", method, code)
			}
			st, ok := status.FromError(err)
			if !ok {
				t.Fatalf("%s with %s: status.FromError cannot read %q", method, code, err)
			}
			if st.Code() != code || st.Message() != msg {
				t.Errorf("%s: sent code %s message %q, got code %s message %q", method, code, msg, st.Code(), st.Message())
			}
		}
	}
}

// Uninitialized comes with the VM's providerID and node name, which MCM's machine controller reads from the
// response beside the error; remote returns both, as an in-process driver would.
func TestUninitializedCarriesTheResponse(t *testing.T) {
	f, d, _ := setup(t)
	f.set(func(f *fakeDriver) {
		f.err = status.Error(codes.Uninitialized, "awaits initialization")
		f.getStatus = &driver.GetMachineStatusResponse{ProviderID: "aws:///eu-west-1a/i-1", NodeName: "ip-10-0-0-1"}
	})
	m := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}
	c := &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	resp, err := d.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: &corev1.Secret{}})
	if st, _ := status.FromError(err); st.Code() != codes.Uninitialized || st.Message() != "awaits initialization" {
		t.Fatalf("got error %v, want Uninitialized", err)
	}
	if resp == nil || resp.ProviderID != "aws:///eu-west-1a/i-1" || resp.NodeName != "ip-10-0-0-1" {
		t.Errorf("response with Uninitialized = %+v, want the providerID and node name", resp)
	}
	// Other errors carry no response (the driver's is dropped: MCM reads it only with Uninitialized).
	f.set(func(f *fakeDriver) { f.err = status.Error(codes.NotFound, "gone") })
	resp, err = d.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{Machine: m, MachineClass: c, Secret: &corev1.Secret{}})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound || resp == nil || resp.ProviderID != "" {
		t.Errorf("NotFound: got %+v, %v", resp, err)
	}
}

// On the wire: the gRPC code is the machine code's number (17 included: grpc-go sends and reads it as is) and
// the trailer names the code.
func TestWireCodeAndTrailer(t *testing.T) {
	f, _, raw := setup(t)
	for _, code := range allCodes {
		f.set(func(f *fakeDriver) { f.err = status.Error(code, "no") })
		var trailer metadata.MD
		_, err := raw.GetMachineStatus(context.Background(), &driverpb.MachineRequest{}, grpc.Trailer(&trailer))
		if got := grpcstatus.Code(err); uint32(got) != uint32(code) {
			t.Errorf("%s: gRPC code on the wire %d (%s), want %d", code, uint32(got), got, uint32(code))
		}
		if got := trailer.Get("mcm-machine-code"); len(got) != 1 || got[0] != code.String() {
			t.Errorf("%s: trailer mcm-machine-code = %q, want [%q]", code, got, code.String())
		}
		if got := grpcstatus.Convert(err).Message(); got != "no" {
			t.Errorf("%s: message %q, want %q", code, got, "no")
		}
	}
}

// remote trusts the trailer over the gRPC code (a server that cannot send 17 sends Unknown and the trailer),
// and falls back to the gRPC code without one.
func TestRemoteReadsTrailerFirst(t *testing.T) {
	endpoint, _ := socket(t)
	serveRaw(t, endpoint, trailerServer{})
	d := remoteDriver(t, endpoint)
	resp, err := d.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.Uninitialized {
		t.Errorf("UNKNOWN with trailer Uninitialized: got %v", err)
	}
	if resp == nil {
		t.Error("GetMachineStatus returned a nil response with Uninitialized (MCM's machine controller reads it)")
	}
	_, err = d.ListMachines(context.Background(), &driver.ListMachinesRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted {
		t.Errorf("RESOURCE_EXHAUSTED without trailer: got %v", err)
	}
	_, err = d.GetVolumeIDs(context.Background(), &driver.GetVolumeIDsRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.NotFound {
		t.Errorf("UNKNOWN with a bad trailer name: got %v, want the gRPC code", err)
	}
}

// trailerServer fails calls the way other servers might.
type trailerServer struct {
	driverpb.UnimplementedDriverServer
}

func (trailerServer) GetMachineStatus(ctx context.Context, _ *driverpb.MachineRequest) (*driverpb.GetMachineStatusResponse, error) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs("mcm-machine-code", "Uninitialized"))
	return nil, grpcstatus.Error(grpccodes.Unknown, "not initialized")
}

func (trailerServer) ListMachines(context.Context, *driverpb.ListMachinesRequest) (*driverpb.ListMachinesResponse, error) {
	return nil, grpcstatus.Error(grpccodes.ResourceExhausted, "quota")
}

func (trailerServer) GetVolumeIDs(ctx context.Context, _ *driverpb.GetVolumeIDsRequest) (*driverpb.GetVolumeIDsResponse, error) {
	_ = grpc.SetTrailer(ctx, metadata.Pairs("mcm-machine-code", "NoSuchCode"))
	return nil, grpcstatus.Error(grpccodes.NotFound, "gone")
}

func serveRaw(t *testing.T, endpoint string, s driverpb.DriverServer) {
	t.Helper()
	lis, err := net.Listen("unix", endpoint[len("unix://"):])
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	driverpb.RegisterDriverServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// Errors that are not machine-codes statuses are Unknown with the error's text, as MCM reads them; wrapped
// statuses keep their code; OK on an error, and a panic, are made real errors.
func TestOtherErrors(t *testing.T) {
	f, d, raw := setup(t)
	cases := []struct {
		name     string
		err      error
		panicMsg string
		code     codes.Code
		msg      string
	}{
		{name: "plain error", err: errors.New("boom"), code: codes.Unknown, msg: "boom"},
		{name: "context error", err: context.DeadlineExceeded, code: codes.Unknown, msg: "context deadline exceeded"},
		{name: "wrapped status", err: fmt.Errorf("creating: %w", status.Error(codes.ResourceExhausted, "quota")), code: codes.ResourceExhausted, msg: "quota"},
		{name: "OK as an error", err: status.Error(codes.OK, "fine?"), code: codes.Unknown, msg: "fine?"},
		{name: "panic", panicMsg: "driver bug", code: codes.Internal, msg: "the driver panicked in GetMachineStatus"},
	}
	for _, tc := range cases {
		f.set(func(f *fakeDriver) { f.err, f.panicMsg = tc.err, tc.panicMsg })
		_, err := d.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{})
		st, _ := status.FromError(err)
		if st.Code() != tc.code || st.Message() != tc.msg {
			t.Errorf("%s: got code %s message %q, want %s %q", tc.name, st.Code(), st.Message(), tc.code, tc.msg)
		}
		var trailer metadata.MD
		_, err = raw.GetMachineStatus(context.Background(), &driverpb.MachineRequest{}, grpc.Trailer(&trailer))
		if got := trailer.Get("mcm-machine-code"); len(got) != 1 || got[0] != tc.code.String() || uint32(grpcstatus.Code(err)) != uint32(tc.code) {
			t.Errorf("%s: on the wire code %d trailer %q, want %d %q", tc.name, grpcstatus.Code(err), got, tc.code, tc.code.String())
		}
	}
}

// A request on the wire becomes the MCM objects drivers read.
func TestRequestFromProto(t *testing.T) {
	f, _, raw := setup(t)
	spec := []byte(`{"image":"ubuntu","size":"m5.large"}`)
	req := &driverpb.MachineRequest{
		Machine: &driverpb.Machine{
			Name: "worker-1", Namespace: "shoot--a", ProviderId: "inmemory:///worker-1",
			Labels:           map[string]string{"node.kubernetes.io/role": "worker"},
			NodeTemplateJson: []byte(`{"metadata":{"labels":{"pool":"a"}},"spec":{"taints":[{"key":"k","value":"v","effect":"NoSchedule"}]}}`),
		},
		MachineClass: &driverpb.MachineClass{
			Name: "class-a", Provider: "InMemory", ProviderSpecJson: spec,
			NodeTemplateJson: []byte(`{"capacity":{"cpu":"4","memory":"8Gi"},"instanceType":"m5.large","region":"eu-1","zone":"eu-1a"}`),
		},
		SecretData:     map[string][]byte{"userData": []byte("#cloud-config"), "token": []byte("s3cr3t")},
		LastKnownState: "state-7",
	}
	if _, err := raw.CreateMachine(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := f.last(t).(*driver.CreateMachineRequest)
	m, c, s := got.Machine, got.MachineClass, got.Secret
	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", what, got, want)
		}
	}
	check("machine name", m.Name, "worker-1")
	check("machine namespace", m.Namespace, "shoot--a")
	check("machine labels", m.Labels, map[string]string{"node.kubernetes.io/role": "worker"})
	check("providerID", m.Spec.ProviderID, "inmemory:///worker-1")
	check("lastKnownState", m.Status.LastKnownState, "state-7")
	check("node template labels", m.Spec.NodeTemplateSpec.Labels, map[string]string{"pool": "a"})
	check("node template taints", m.Spec.NodeTemplateSpec.Spec.Taints, []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}})
	check("class name", c.Name, "class-a")
	check("class namespace", c.Namespace, "shoot--a")
	check("class provider", c.Provider, "InMemory")
	check("providerSpec bytes", string(c.ProviderSpec.Raw), string(spec))
	if c.NodeTemplate == nil {
		t.Fatal("class node template missing")
	}
	check("class instance type", c.NodeTemplate.InstanceType, "m5.large")
	check("class region/zone", c.NodeTemplate.Region+"/"+c.NodeTemplate.Zone, "eu-1/eu-1a")
	if q := c.NodeTemplate.Capacity[corev1.ResourceMemory]; q.Cmp(resource.MustParse("8Gi")) != 0 {
		t.Errorf("class capacity memory = %s", q.String())
	}
	check("secret data", s.Data, map[string][]byte{"userData": []byte("#cloud-config"), "token": []byte("s3cr3t")})
	check("secret name", s.Name, "class-a")

	// Unset node templates stay unset; ListMachines has a class (without namespace) and the secret.
	if _, err := raw.ListMachines(context.Background(), &driverpb.ListMachinesRequest{
		MachineClass: &driverpb.MachineClass{Name: "class-b"}, SecretData: map[string][]byte{"k": []byte("v")},
	}); err != nil {
		t.Fatal(err)
	}
	list := f.last(t).(*driver.ListMachinesRequest)
	check("list class", list.MachineClass.Name, "class-b")
	check("list class node template", list.MachineClass.NodeTemplate, (*v1alpha1.NodeTemplate)(nil))
	check("list secret", list.Secret.Data, map[string][]byte{"k": []byte("v")})

	// PV specs arrive decoded.
	if _, err := raw.GetVolumeIDs(context.Background(), &driverpb.GetVolumeIDsRequest{PvSpecsJson: [][]byte{
		[]byte(`{"csi":{"driver":"disk.csi.example","volumeHandle":"vol-1"}}`), []byte(`{"hostPath":{"path":"/x"}}`),
	}}); err != nil {
		t.Fatal(err)
	}
	pv := f.last(t).(*driver.GetVolumeIDsRequest)
	if len(pv.PVSpecs) != 2 || pv.PVSpecs[0].CSI == nil || pv.PVSpecs[0].CSI.VolumeHandle != "vol-1" || pv.PVSpecs[1].HostPath == nil {
		t.Errorf("PV specs = %+v", pv.PVSpecs)
	}
}

// Bad JSON is InvalidArgument, without calling the driver and without echoing the bytes.
func TestBadJSON(t *testing.T) {
	f, _, raw := setup(t)
	_, err := raw.CreateMachine(context.Background(), &driverpb.MachineRequest{
		MachineClass: &driverpb.MachineClass{NodeTemplateJson: []byte(`{"capacity": "s3cr3t"`)},
	})
	if grpcstatus.Code(err) != grpccodes.InvalidArgument || bytes.Contains([]byte(err.Error()), []byte("s3cr3t")) {
		t.Errorf("bad class node template: %v", err)
	}
	_, err = raw.GetVolumeIDs(context.Background(), &driverpb.GetVolumeIDsRequest{PvSpecsJson: [][]byte{[]byte(`[]`)}})
	if grpcstatus.Code(err) != grpccodes.InvalidArgument {
		t.Errorf("bad PV spec: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 0 {
		t.Errorf("the driver was called %d times", len(f.requests))
	}
}

// MCM objects go through remote, the wire and the adapter, and the driver gets what the caller passed.
func TestMCMObjectsRoundTrip(t *testing.T) {
	f, d, _ := setup(t)
	machine := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-2", Namespace: "ns", Labels: map[string]string{"a": "b"}},
		Spec: v1alpha1.MachineSpec{
			ProviderID: "inmemory:///worker-2",
			NodeTemplateSpec: v1alpha1.NodeTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"pool": "p"}, Annotations: map[string]string{"x": "y"}},
				Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "t", Effect: corev1.TaintEffectNoExecute}}},
			},
		},
		Status: v1alpha1.MachineStatus{LastKnownState: "lks"},
	}
	class := &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: "cls", Namespace: "ns"},
		Provider:     "InMemory",
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"a":1}`)},
		NodeTemplate: &v1alpha1.NodeTemplate{
			Capacity:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
			InstanceType: "small", Region: "r", Zone: "z", Architecture: ptr("arm64"),
		},
	}
	secret := &corev1.Secret{Data: map[string][]byte{"userData": []byte("ud")}, StringData: map[string]string{"extra": "e"}}
	if _, err := d.DeleteMachine(context.Background(), &driver.DeleteMachineRequest{Machine: machine, MachineClass: class, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	got := f.last(t).(*driver.DeleteMachineRequest)
	if !reflect.DeepEqual(got.Machine.ObjectMeta, machine.ObjectMeta) || !reflect.DeepEqual(got.Machine.Spec, machine.Spec) || got.Machine.Status.LastKnownState != "lks" {
		t.Errorf("machine:\n got  %+v\n want %+v", got.Machine, machine)
	}
	if string(got.MachineClass.ProviderSpec.Raw) != `{"a":1}` || got.MachineClass.Provider != "InMemory" || got.MachineClass.Name != "cls" {
		t.Errorf("class = %+v", got.MachineClass)
	}
	if nt := got.MachineClass.NodeTemplate; nt == nil || nt.InstanceType != "small" || nt.Region != "r" || nt.Zone != "z" ||
		nt.Architecture == nil || *nt.Architecture != "arm64" || nt.Capacity.Cpu().String() != "2" {
		t.Errorf("class node template = %+v", got.MachineClass.NodeTemplate)
	}
	if want := map[string][]byte{"userData": []byte("ud"), "extra": []byte("e")}; !reflect.DeepEqual(got.Secret.Data, want) {
		t.Errorf("secret data = %q, want %q", got.Secret.Data, want)
	}
}

func ptr[T any](v T) *T { return &v }

// Responses come back whole: IDs, node names, last known state, addresses, the machine list and volume IDs.
func TestResponsesRoundTrip(t *testing.T) {
	f, d, _ := setup(t)
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}, {Type: corev1.NodeHostName, Address: "w-3"}}
	f.set(func(f *fakeDriver) {
		f.create = &driver.CreateMachineResponse{ProviderID: "p://3", NodeName: "w-3", LastKnownState: "created", Addresses: addrs}
		f.init = &driver.InitializeMachineResponse{ProviderID: "p://3", NodeName: "w-3", Addresses: addrs[:1]}
		f.del = &driver.DeleteMachineResponse{LastKnownState: "deleting"}
		f.getStatus = &driver.GetMachineStatusResponse{ProviderID: "p://3", NodeName: "w-3", Addresses: addrs}
		f.list = &driver.ListMachinesResponse{MachineList: map[string]string{"p://3": "w-3", "p://4": "w-4"}}
		f.volumes = &driver.GetVolumeIDsResponse{VolumeIDs: []string{"vol-1", "vol-2"}}
	})
	ctx := context.Background()
	cr, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{})
	if err != nil || !reflect.DeepEqual(*cr, driver.CreateMachineResponse{ProviderID: "p://3", NodeName: "w-3", LastKnownState: "created", Addresses: addrs}) {
		t.Errorf("CreateMachine = %+v, %v", cr, err)
	}
	ir, err := d.InitializeMachine(ctx, &driver.InitializeMachineRequest{})
	if err != nil || !reflect.DeepEqual(*ir, driver.InitializeMachineResponse{ProviderID: "p://3", NodeName: "w-3", Addresses: addrs[:1]}) {
		t.Errorf("InitializeMachine = %+v, %v", ir, err)
	}
	dr, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{})
	if err != nil || dr.LastKnownState != "deleting" {
		t.Errorf("DeleteMachine = %+v, %v", dr, err)
	}
	gr, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{})
	if err != nil || !reflect.DeepEqual(*gr, driver.GetMachineStatusResponse{ProviderID: "p://3", NodeName: "w-3", Addresses: addrs}) {
		t.Errorf("GetMachineStatus = %+v, %v", gr, err)
	}
	lr, err := d.ListMachines(ctx, &driver.ListMachinesRequest{})
	if err != nil || !reflect.DeepEqual(lr.MachineList, map[string]string{"p://3": "w-3", "p://4": "w-4"}) {
		t.Errorf("ListMachines = %+v, %v", lr, err)
	}
	pvs := []*corev1.PersistentVolumeSpec{{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
	vr, err := d.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{PVSpecs: pvs})
	if err != nil || !reflect.DeepEqual(vr.VolumeIDs, []string{"vol-1", "vol-2"}) {
		t.Errorf("GetVolumeIDs = %+v, %v", vr, err)
	}
	if got := f.last(t).(*driver.GetVolumeIDsRequest).PVSpecs; len(got) != 1 || !reflect.DeepEqual(got[0], pvs[0]) {
		t.Errorf("PV specs at the driver = %+v", got)
	}
	// A nil response where a provider ID is needed is a driver bug: Internal, not an empty success.
	f.set(func(f *fakeDriver) { f.create = nil })
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{}); err == nil {
		t.Error("CreateMachine with a nil response succeeded")
	} else if st, _ := status.FromError(err); st.Code() != codes.Internal {
		t.Errorf("CreateMachine with a nil response: %v", err)
	}
}

// Neither secret data nor a panic's value reaches the log.
func TestSecretsNotLogged(t *testing.T) {
	var buf bytes.Buffer
	log.SetOutput(&buf)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	f, d, _ := setup(t)
	secret := &corev1.Secret{Data: map[string][]byte{"password": []byte("hunter2-secret")}}
	f.set(func(f *fakeDriver) { f.err = errors.New("failed") })
	callAll(context.Background(), d)
	f.set(func(f *fakeDriver) { f.err, f.panicMsg = nil, "panic hunter2-secret" })
	_, _ = d.CreateMachine(context.Background(), &driver.CreateMachineRequest{Secret: secret})
	if bytes.Contains(buf.Bytes(), []byte("hunter2")) {
		t.Errorf("the log holds a secret:\n%s", buf.String())
	}
	if !bytes.Contains(buf.Bytes(), []byte("panicked in CreateMachine")) {
		t.Errorf("the panic was not logged:\n%s", buf.String())
	}
}

// Loopback TCP in each accepted form.
func TestTCPEndpoints(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	_ = lis.Close()
	f := &fakeDriver{volumes: &driver.GetVolumeIDsResponse{VolumeIDs: []string{"v"}}}
	serve(t, fmt.Sprintf("http://127.0.0.1:%d", port), f)
	for _, ep := range []string{"http://127.0.0.1:%d", "tcp://127.0.0.1:%d", "127.0.0.1:%d", "http://localhost:%d/"} {
		d := remoteDriver(t, fmt.Sprintf(ep, port))
		r, err := d.GetVolumeIDs(context.Background(), &driver.GetVolumeIDsRequest{})
		if err != nil || len(r.VolumeIDs) != 1 {
			t.Errorf("%s: %+v, %v", ep, r, err)
		}
	}
}

// A socket left behind is replaced; a live one and a regular file are not touched; the socket goes on stop.
func TestSocketFile(t *testing.T) {
	endpoint, path := socket(t)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = lis.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- adapter.Serve(ctx, endpoint, &fakeDriver{}) }()
	waitForServer(t, endpoint)

	// A second server on the live socket fails and leaves the first one serving.
	if err := adapter.Serve(context.Background(), endpoint, &fakeDriver{}); err == nil {
		t.Error("a second Serve on a live socket succeeded")
	}
	waitForServer(t, endpoint)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after stop: %v", err)
	}

	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := adapter.Serve(context.Background(), endpoint, &fakeDriver{}); err == nil {
		t.Error("Serve replaced a regular file")
	}
	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Error("the regular file was changed")
	}
}

// With no server, calls fail with Unavailable (MCM retries those) rather than hanging.
func TestNoServer(t *testing.T) {
	endpoint, _ := socket(t)
	d := remoteDriver(t, endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable {
		t.Errorf("no server: %v", err)
	}
	if _, err := remote.New("10.1.2.3:80"); err == nil {
		t.Error("remote.New accepted a non-loopback endpoint")
	}
}

// The relay's chain (cmd/mcm-driver-relay): protocol -> adapter -> MCM types -> remote -> protocol -> driver.
// Requests, responses and codes survive both crossings.
func TestRelayChain(t *testing.T) {
	f := newFake()
	upstream, _ := socket(t)
	serve(t, upstream, f)
	f.set(func(f *fakeDriver) { f.requests = nil })
	relayEndpoint, _ := socket(t)
	serve(t, relayEndpoint, remoteDriver(t, upstream))
	f.set(func(f *fakeDriver) { f.requests = nil })
	raw := rawClient(t, relayEndpoint)

	f.set(func(f *fakeDriver) {
		f.create = &driver.CreateMachineResponse{ProviderID: "p://1", NodeName: "n1", LastKnownState: "s",
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}
	})
	resp, err := raw.CreateMachine(context.Background(), &driverpb.MachineRequest{
		Machine:        &driverpb.Machine{Name: "m1", Namespace: "ns", ProviderId: "p://1", Labels: map[string]string{"l": "v"}},
		MachineClass:   &driverpb.MachineClass{Name: "c", Provider: "InMemory", ProviderSpecJson: []byte(`{"x":"y"}`)},
		SecretData:     map[string][]byte{"userData": []byte("ud")},
		LastKnownState: "before",
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetProviderId() != "p://1" || resp.GetNodeName() != "n1" || resp.GetLastKnownState() != "s" ||
		len(resp.GetAddresses()) != 1 || resp.GetAddresses()[0].GetAddress() != "10.0.0.1" {
		t.Errorf("response through the relay = %v", resp)
	}
	got := f.last(t).(*driver.CreateMachineRequest)
	if got.Machine.Name != "m1" || got.Machine.Namespace != "ns" || got.Machine.Labels["l"] != "v" ||
		got.Machine.Status.LastKnownState != "before" || string(got.MachineClass.ProviderSpec.Raw) != `{"x":"y"}` ||
		string(got.Secret.Data["userData"]) != "ud" || got.MachineClass.Namespace != "ns" {
		t.Errorf("request through the relay: machine %+v class %+v", got.Machine, got.MachineClass)
	}

	for _, code := range allCodes {
		f.set(func(f *fakeDriver) { f.err = status.Error(code, "via relay") })
		var trailer metadata.MD
		_, err := raw.GetMachineStatus(context.Background(), &driverpb.MachineRequest{}, grpc.Trailer(&trailer))
		if uint32(grpcstatus.Code(err)) != uint32(code) || grpcstatus.Convert(err).Message() != "via relay" ||
			len(trailer.Get("mcm-machine-code")) != 1 || trailer.Get("mcm-machine-code")[0] != code.String() {
			t.Errorf("%s through the relay: %v, trailer %v", code, err, trailer)
		}
	}
}
