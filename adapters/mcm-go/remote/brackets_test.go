package remote

import (
	"testing"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
)

// Whatever the message, MCM's status.FromError reads the code back from remote's errors.
func TestMessagesKeepTheCode(t *testing.T) {
	for _, msg := range []string{"plain", "quota [3 of 3]", "a [b [c]] d", "unbalanced [", "unbalanced ]", "] x [", ""} {
		err := status.Error(codes.ResourceExhausted, balanceBrackets(msg))
		st, ok := status.FromError(err)
		if !ok || st.Code() != codes.ResourceExhausted {
			t.Errorf("%q: read back %v (ok=%v)", msg, st.Code(), ok)
		}
	}
	if got := balanceBrackets("quota [3 of 3]"); got != "quota [3 of 3]" {
		t.Errorf("balanced message changed: %q", got)
	}
}
