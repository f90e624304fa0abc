package rt

import (
	"context"

	"github.com/meshrun/meshrun/ir"
)

// WaitForLead holds this process until rank 0's process calls it too: a
// broadcast from rank 0 on the launcher's own world group, which the
// others can only finish once rank 0 has sent. The CLI calls it after a
// checkpoint, which rank 0 alone writes, so that no other rank meanwhile
// times out in the next collective. (Under MPI the CLI uses MPI_Barrier.)
func (m *MPI) WaitForLead(ctx context.Context) error {
	var x Buffer
	if m.world.Index() == 0 {
		x = FromSlice([]int{1}, []int64{1})
	}
	_, err := m.world.Broadcast(ctx, x, 0, ir.I64, []int{1})
	return err
}
