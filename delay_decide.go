package settle

import (
	"fmt"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/source"
)

// delayRefusal says why a RetryAfter delay cannot be kept where the mount keeps its
// delays, or returns "" when it can. A delay longer than a DurableZset's TTL would be
// lost with the set, so it is refused and the delivery retried at once instead.
func delayRefusal(delay time.Duration, p source.Policy) string {
	if dz, ok := p.Delay.(delayed.DurableZset); ok && dz.TTL > 0 && delay > dz.TTL {
		return fmt.Sprintf("delay %s refused: it exceeds the TTL %s of the delay set %q (raise DurableZset.TTL); retried now instead", delay, dz.TTL, dz.Key)
	}
	return ""
}
