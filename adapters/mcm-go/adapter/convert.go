package adapter

import (
	"encoding/json"
	"fmt"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gardener/cluster-api-provider-mcm/adapters/mcm-go/driverpb"
)

// The request's objects as MCM's driver calls receive them.
type mcmObjects struct {
	machine *v1alpha1.Machine
	class   *v1alpha1.MachineClass
	secret  *corev1.Secret
}

func fromMachineRequest(req *driverpb.MachineRequest) (mcmObjects, error) {
	m := req.GetMachine()
	machine := &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), Labels: m.GetLabels()},
		Spec:       v1alpha1.MachineSpec{ProviderID: m.GetProviderId()},
		Status:     v1alpha1.MachineStatus{LastKnownState: req.GetLastKnownState()},
	}
	if err := decodeJSON("machine.node_template_json", m.GetNodeTemplateJson(), &machine.Spec.NodeTemplateSpec); err != nil {
		return mcmObjects{}, err
	}
	class, err := fromClass(req.GetMachineClass(), m.GetNamespace())
	if err != nil {
		return mcmObjects{}, err
	}
	return mcmObjects{machine: machine, class: class, secret: toSecret(req.GetSecretData(), class)}, nil
}

// fromClass builds the MachineClass; the protocol does not carry its namespace, which is the machine's (MCM
// requires a machine's class in the machine's namespace), and is empty for ListMachines.
func fromClass(c *driverpb.MachineClass, namespace string) (*v1alpha1.MachineClass, error) {
	class := &v1alpha1.MachineClass{
		ObjectMeta: metav1.ObjectMeta{Name: c.GetName(), Namespace: namespace},
		Provider:   c.GetProvider(),
	}
	if raw := c.GetProviderSpecJson(); len(raw) > 0 {
		class.ProviderSpec = runtime.RawExtension{Raw: raw}
	}
	if raw := c.GetNodeTemplateJson(); len(raw) > 0 {
		class.NodeTemplate = &v1alpha1.NodeTemplate{}
		if err := decodeJSON("machine_class.node_template_json", raw, class.NodeTemplate); err != nil {
			return nil, err
		}
	}
	return class, nil
}

// toSecret is the class's secret as MCM's machine controller passes it: only Data matters to drivers (MCM
// itself passes a Secret with nothing but Data); it is named after the class for drivers that log a name.
func toSecret(data map[string][]byte, class *v1alpha1.MachineClass) *corev1.Secret {
	if data == nil {
		data = map[string][]byte{}
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: class.Name, Namespace: class.Namespace},
		Data:       data,
	}
}

func fromPVSpecs(specs [][]byte) ([]*corev1.PersistentVolumeSpec, error) {
	out := make([]*corev1.PersistentVolumeSpec, 0, len(specs))
	for i, raw := range specs {
		spec := &corev1.PersistentVolumeSpec{}
		if err := decodeJSON(fmt.Sprintf("pv_specs_json[%d]", i), raw, spec); err != nil {
			return nil, err
		}
		out = append(out, spec)
	}
	return out, nil
}

// decodeJSON leaves out empty (unset) and answers InvalidArgument on bad JSON. The message names the field and
// the decoder's complaint (a position or a type), never the bytes.
func decodeJSON(field string, raw []byte, into any) error {
	if len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return status.Error(codes.InvalidArgument, fmt.Sprintf("%s: not valid JSON for its type: %v", field, err))
	}
	return nil
}

func toAddresses(in []corev1.NodeAddress) []*driverpb.NodeAddress {
	if len(in) == 0 {
		return nil
	}
	out := make([]*driverpb.NodeAddress, 0, len(in))
	for _, a := range in {
		out = append(out, &driverpb.NodeAddress{Type: string(a.Type), Address: a.Address})
	}
	return out
}
