package schema

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// CheckIntegrity verifies what the writer promises about a file: every
// row's stack_id is in the stack dictionary, every frame ID of a stack is in
// the frame dictionary, every row's series_id is in the series dictionary,
// stack IDs and frame lists are unique in the stack dictionary, and every
// trace-tagged sample is also in Samples.
// Tests use it after crashes and cleanups.
func CheckIntegrity(ctx context.Context, db *sql.DB, t Tier) error {
	tb := TablesFor(t)
	var missing, missingStacks, missingSeries, tracedOver, dupStacks int64
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT DISTINCT unnest(stack_frame_ids) AS id FROM `+tb.StackDict+`)
WHERE id NOT IN (SELECT frame_id FROM `+tb.Frames+`)`).Scan(&missing)
	if err != nil {
		return fmt.Errorf("check integrity: %w", err)
	}
	var stacks, series []string
	for _, table := range tb.RowTables() {
		stacks = append(stacks, "SELECT stack_id FROM "+table)
		series = append(series, "SELECT series_id FROM "+table)
	}
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM (`+strings.Join(stacks, " UNION ")+`)
WHERE stack_id NOT IN (SELECT stack_id FROM `+tb.StackDict+`)`).Scan(&missingStacks)
	if err != nil {
		return fmt.Errorf("check integrity: %w", err)
	}
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM (`+strings.Join(series, " UNION ")+`)
WHERE series_id NOT IN (SELECT series_id FROM `+tb.Series+`)`).Scan(&missingSeries)
	if err != nil {
		return fmt.Errorf("check integrity: %w", err)
	}
	// The stack dictionary has no key: the writer keeps IDs and frame
	// lists unique.
	err = db.QueryRowContext(ctx, `SELECT (count(*) - count(DISTINCT stack_id)) + (count(*) - count(DISTINCT stack_frame_ids)) FROM `+tb.StackDict).Scan(&dupStacks)
	if err != nil {
		return fmt.Errorf("check integrity: %w", err)
	}
	// Trace-tagged samples are a part of Samples: the RFD view, which
	// subtracts them, then sums to the same total.
	err = db.QueryRowContext(ctx, `SELECT coalesce((SELECT sum(sample_count) FROM `+tb.Stacks+`), 0) - coalesce((SELECT sum(sample_count) FROM `+tb.Samples+`), 0)`).Scan(&tracedOver)
	if err != nil {
		return fmt.Errorf("check integrity: %w", err)
	}
	if missing > 0 || missingStacks > 0 || missingSeries > 0 || tracedOver != 0 || dupStacks > 0 {
		return fmt.Errorf("integrity: %d frame IDs referenced but not in %s, %d stack IDs not in %s, %d series IDs not in %s, %d trace-tagged samples beyond the samples, %d repeated stack IDs or frame lists in %s",
			missing, tb.Frames, missingStacks, tb.StackDict, missingSeries, tb.Series, tracedOver, dupStacks, tb.StackDict)
	}
	return nil
}
