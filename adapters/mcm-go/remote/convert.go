package remote

import (
	"encoding/json"
	"fmt"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/driverpb"
)

func toMachineRequest(m *v1alpha1.Machine, class *v1alpha1.MachineClass, secret *corev1.Secret) (*driverpb.MachineRequest, error) {
	pc, err := toClass(class)
	if err != nil {
		return nil, err
	}
	req := &driverpb.MachineRequest{MachineClass: pc, SecretData: toSecretData(secret), Machine: &driverpb.Machine{}}
	if m == nil {
		return req, nil
	}
	req.Machine = &driverpb.Machine{
		Name: m.Name, Namespace: m.Namespace, ProviderId: m.Spec.ProviderID, Labels: m.Labels,
	}
	req.LastKnownState = m.Status.LastKnownState
	// Empty when unset (nil and empty maps alike), as the protocol says.
	if !equality.Semantic.DeepEqual(m.Spec.NodeTemplateSpec, v1alpha1.NodeTemplateSpec{}) {
		if req.Machine.NodeTemplateJson, err = encodeJSON("machine spec.nodeTemplate", m.Spec.NodeTemplateSpec); err != nil {
			return nil, err
		}
	}
	return req, nil
}

func toClass(c *v1alpha1.MachineClass) (*driverpb.MachineClass, error) {
	if c == nil {
		return &driverpb.MachineClass{}, nil
	}
	out := &driverpb.MachineClass{Name: c.Name, Provider: c.Provider, ProviderSpecJson: c.ProviderSpec.Raw}
	if out.ProviderSpecJson == nil && c.ProviderSpec.Object != nil {
		raw, err := encodeJSON("machine class providerSpec", c.ProviderSpec.Object)
		if err != nil {
			return nil, err
		}
		out.ProviderSpecJson = raw
	}
	if c.NodeTemplate != nil {
		raw, err := encodeJSON("machine class nodeTemplate", c.NodeTemplate)
		if err != nil {
			return nil, err
		}
		out.NodeTemplateJson = raw
	}
	return out, nil
}

// toSecretData is the secret's data, with stringData (which a Go caller may have set) written over it as the
// API server would.
func toSecretData(s *corev1.Secret) map[string][]byte {
	if s == nil {
		return nil
	}
	if len(s.StringData) == 0 {
		return s.Data
	}
	data := make(map[string][]byte, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		data[k] = v
	}
	for k, v := range s.StringData {
		data[k] = []byte(v)
	}
	return data
}

func toPVSpecs(specs []*corev1.PersistentVolumeSpec) ([][]byte, error) {
	out := make([][]byte, 0, len(specs))
	for i, spec := range specs {
		if spec == nil {
			spec = &corev1.PersistentVolumeSpec{}
		}
		raw, err := encodeJSON(fmt.Sprintf("PV spec %d", i), spec)
		if err != nil {
			return nil, err
		}
		out = append(out, raw)
	}
	return out, nil
}

func encodeJSON(what string, v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("encoding the %s as JSON: %v", what, err))
	}
	return raw, nil
}

func fromAddresses(in []*driverpb.NodeAddress) []corev1.NodeAddress {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.NodeAddress, 0, len(in))
	for _, a := range in {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(a.GetType()), Address: a.GetAddress()})
	}
	return out
}
