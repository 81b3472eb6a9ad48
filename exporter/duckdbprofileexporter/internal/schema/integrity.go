package schema

import (
	"context"
	"database/sql"
	"fmt"
)

// CheckIntegrity verifies what the writer promises about a file: every frame
// ID in a stack exists in the dictionary, and every frame's frame_count equals
// its occurrences in stored stacks. Tests use it after crashes and cleanups.
func CheckIntegrity(ctx context.Context, db *sql.DB, t Tier) error {
	tb := TablesFor(t)
	var missing, wrongCount int64
	err := db.QueryRowContext(ctx, `WITH refs AS (
    SELECT id, count(*) AS n FROM (SELECT unnest(stack_frame_ids) AS id FROM `+tb.Stacks+`) GROUP BY id
)
SELECT count(*) FILTER (WHERE f.frame_id IS NULL),
       count(*) FILTER (WHERE f.frame_id IS NOT NULL AND f.frame_count <> coalesce(r.n, 0))
FROM refs r FULL OUTER JOIN `+tb.Frames+` f ON f.frame_id = r.id`).Scan(&missing, &wrongCount)
	if err != nil {
		return fmt.Errorf("check integrity: %w", err)
	}
	if missing > 0 || wrongCount > 0 {
		return fmt.Errorf("integrity: %d frame IDs referenced but not in %s, %d frames with a wrong frame_count", missing, tb.Frames, wrongCount)
	}
	return nil
}
