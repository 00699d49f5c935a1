package history

import "context"

// WaitApproved returns once s holds the fact id as approved.
func WaitApproved(ctx context.Context, s *Store, id string) error {
	for {
		s.mu.Lock()
		e, moved := s.byID[id], s.moved
		done := e != nil && e.approved
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
