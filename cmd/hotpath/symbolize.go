package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	duckdb "github.com/duckdb/duckdb-go/v2"
	"github.com/spf13/cobra"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
)

const symbolizeExamples = `  # after the binary was stripped or deleted: resolve its stored addresses with the debug file
  hotpath symbolize --build-id 1f0e9d8c7b6a --symbols ./app.debug
  hotpath symbolize --local --build-id 1f0e9d8c7b6a --symbols /usr/lib/debug/.build-id/1f/0e9d8c7b6a.debug --dry-run
  # stop the collector first: rewriting the frame dictionary needs the only handle on the file
`

// newSymbolizeCommand resolves the "file+0xOFF" frames that a build's
// stacks stored because no symbols were available at sampling time (RFD 072
// delayed symbolization), and rewrites them in place.
func newSymbolizeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "symbolize --build-id B --symbols FILE [--db FILE] [flags]",
		Short:   "resolve stored raw addresses of a build ID with a debug/symbol file",
		Example: symbolizeExamples,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	db := fs.String("db", os.Getenv("HOTPATH_DB"), "DuckDB file to rewrite (default: the gateway's file, or the agent's with --local; see hotpath profile --help)")
	local := fs.Bool("local", false, "the agent's file instead of the gateway's")
	build := fs.String("build-id", "", "build ID (or a unique prefix) whose raw addresses to resolve; required")
	symbols := fs.String("symbols", "", "ELF file with symbols for that build: the unstripped binary or its separate debug file; required")
	binary := fs.String("binary", "", "file name in the raw frames (\"app\" in app+0x1a2b); default: from the build's binary metadata")
	force := fs.Bool("force", false, "use --symbols even when its build ID differs from --build-id")
	dryRun := fs.Bool("dry-run", false, "print what would be renamed, change nothing")
	_ = cmd.MarkFlagFilename("symbols")
	_ = cmd.MarkFlagFilename("db", "duckdb")
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		if *build == "" || *symbols == "" {
			return usagef("--build-id and --symbols are required")
		}
		return symbolizeBuild(cmd.Context(), symbolizeRequest{db: *db, local: *local, build: *build, symbols: *symbols,
			binary: *binary, force: *force, dryRun: *dryRun}, cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}

// symbolizeRequest is symbolize's command line.
type symbolizeRequest struct {
	db, build, symbols, binary string
	local, force, dryRun       bool
}

func symbolizeBuild(ctx context.Context, req symbolizeRequest, stdout, stderr io.Writer) error {
	stopProgress := startProgress(stderr, "loading "+req.symbols+" and rewriting frames", 0)
	defer stopProgress()
	path := req.db
	if path == "" {
		path = profilequery.DefaultFile(req.local, "")
	}
	if profilequery.IsEndpoint(path) {
		return fmt.Errorf("--db %s is an endpoint: symbolize rewrites the file, so it needs the file path, with no collector running", path)
	}
	table, err := symbolize.OpenSymbolTable(req.symbols)
	if err != nil {
		return err
	}
	info, err := buildid.Read(req.symbols)
	if err != nil {
		return fmt.Errorf("read build ID of --symbols: %w", err)
	}

	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	conn, err := duckdb.NewConnector(sqlquery.DSN(path, req.dryRun), nil)
	if err != nil {
		if strings.Contains(err.Error(), "lock") {
			return fmt.Errorf("%w\n(a collector holds %s: stop it first; symbolize rewrites the frame dictionary and needs the only handle on the file)", err, path)
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
	sdb := sql.OpenDB(conn)
	defer func() { _ = sdb.Close(); _ = conn.Close() }()

	res, err := rewriteFrames(ctx, sdb, rewriteRequest{build: req.build, binary: req.binary, symbolsPath: req.symbols, dryRun: req.dryRun,
		checkBuild: func(full string) error {
			if req.force || full == info.GNU || full == info.Go || (info.SHA256 != "" && full == buildid.SHA256Prefix+info.SHA256) {
				return nil
			}
			return fmt.Errorf("--symbols %s has build ID %q, not %q: it is another build (--force to use it anyway)", req.symbols, info.Canonical(), full)
		},
		resolve: func(off uint64) (string, bool) {
			addr, ok := table.FileAddr(off)
			if !ok {
				return "", false
			}
			sym, ok := table.Lookup(addr)
			return sym.Function, ok && sym.Function != ""
		}})
	if err != nil {
		return err
	}
	stopProgress()
	verb := "renamed"
	if req.dryRun {
		verb = "would rename"
	}
	for _, r := range res.renamed {
		fmt.Fprintf(stdout, "%s -> %s\n", r[0], r[1])
	}
	fmt.Fprintf(stdout, "build %s: %s %d of %d raw frames (%d did not resolve) in %s\n", res.build, verb, len(res.renamed), res.raw, res.raw-len(res.renamed), path)
	return nil
}

type rewriteRequest struct {
	build, binary, symbolsPath string
	dryRun                     bool
	checkBuild                 func(full string) error
	resolve                    func(fileOffset uint64) (string, bool)
}

type rewriteResult struct {
	build   string
	raw     int
	renamed [][2]string
}

// rewriteFrames points the build's stacks at resolved frame names in one
// transaction. Frames are shared by every build and service, so a raw frame
// is not renamed in place (another build's "app+0x1a2b" is other code): the
// build's stacks get the resolved name's frame ID (an existing one, or a new
// entry), and the raw frames no stack names any more are deleted, as
// retention would.
func rewriteFrames(ctx context.Context, db *sql.DB, req rewriteRequest) (*rewriteResult, error) {
	var tierName string
	var version int
	if err := db.QueryRowContext(ctx, "SELECT tier, version FROM schema_version").Scan(&tierName, &version); err != nil {
		return nil, fmt.Errorf("read schema_version (is it a hotpath file?): %w", err)
	}
	if version != profilequery.WritableVersion {
		return nil, fmt.Errorf("the file has schema version %d and symbolize writes version %d: start the collector on it once (it upgrades the file), or use the hotpath of its version", version, profilequery.WritableVersion)
	}
	tb := profilequery.TablesOf(profilequery.Tier(tierName))

	// Rows name their build through the series dictionary.
	var allSeries, buildRows []string
	ofBuild := "series_id IN (SELECT series_id FROM " + tb.Series + " WHERE build_id = $1)"
	for _, t := range tb.Rows {
		allSeries = append(allSeries, "SELECT series_id FROM "+t)
		buildRows = append(buildRows, "SELECT stack_id FROM "+t+" WHERE "+ofBuild)
	}
	builds, err := strings1(ctx, db, "SELECT DISTINCT build_id FROM "+tb.Series+" WHERE series_id IN ("+strings.Join(allSeries, " UNION ")+") AND build_id <> '' AND starts_with(build_id, ?) ORDER BY 1", req.build)
	if err != nil {
		return nil, fmt.Errorf("find build: %w", err)
	}
	switch {
	case len(builds) == 0:
		return nil, fmt.Errorf("no stored stacks of build ID %q", req.build)
	case len(builds) > 1:
		return nil, fmt.Errorf("build ID prefix %q matches %s: give more of it", req.build, strings.Join(builds, ", "))
	}
	full := builds[0]
	if err := req.checkBuild(full); err != nil {
		return nil, err
	}
	// The build's stacks: stack IDs its rows point to.
	buildStacks := "stack_id IN (" + strings.Join(buildRows, " UNION ") + ")"
	base := req.binary
	if base == "" {
		paths, err := strings1(ctx, db, "SELECT binary_path FROM "+tb.Binaries+" WHERE build_id = ? AND binary_path <> ''", full)
		if err != nil {
			return nil, fmt.Errorf("read binary metadata: %w", err)
		}
		if len(paths) == 0 {
			return nil, fmt.Errorf("no binary path recorded for build %s: give --binary NAME (the file name in its raw frames, e.g. app for app+0x1a2b)", full)
		}
		base = filepath.Base(paths[0])
	}
	prefix := profileschema.RawFramePrefix(base)

	rows, err := db.QueryContext(ctx, `SELECT f.frame_id, f.frame_name FROM
(SELECT DISTINCT unnest(stack_frame_ids) AS id FROM `+tb.StackDict+` WHERE `+buildStacks+`) u
JOIN `+tb.Frames+` f ON f.frame_id = u.id WHERE starts_with(f.frame_name, $2) ORDER BY f.frame_id`, full, prefix)
	if err != nil {
		return nil, fmt.Errorf("find raw frames: %w", err)
	}
	type raw struct {
		id   int32
		name string
	}
	var raws []raw
	for rows.Next() {
		var r raw
		if err := rows.Scan(&r.id, &r.name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("find raw frames: %w", err)
		}
		raws = append(raws, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find raw frames: %w", err)
	}
	res := &rewriteResult{build: full, raw: len(raws)}
	newName := map[int32]string{}
	for _, r := range raws {
		off, err := strconv.ParseUint(strings.TrimPrefix(r.name, prefix), 16, 64)
		if err != nil {
			continue // not an offset after all ("app+0xzz"): leave it
		}
		if name, ok := req.resolve(off); ok {
			newName[r.id] = name
			res.renamed = append(res.renamed, [2]string{r.name, name})
		}
	}
	if req.dryRun || len(newName) == 0 {
		return res, nil
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	var maxID int32
	if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(frame_id), 0) FROM "+tb.Frames).Scan(&maxID); err != nil {
		return nil, fmt.Errorf("read frame IDs: %w", err)
	}
	mapping := map[int32]int32{}
	touched := map[int32]bool{}
	for old, name := range newName {
		var id int32
		err := tx.QueryRowContext(ctx, "SELECT frame_id FROM "+tb.Frames+" WHERE frame_name = ?", name).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			maxID++
			id = maxID
			// The symbolized frame is the same code: it keeps the
			// address frame's type (file and line are unknown).
			_, err = tx.ExecContext(ctx, "INSERT INTO "+tb.Frames+" (frame_id, frame_name, frame_type) VALUES (?, ?, (SELECT frame_type FROM "+tb.Frames+" WHERE frame_id = ?))", id, name, old)
		}
		if err != nil {
			return nil, fmt.Errorf("frame %q: %w", name, err)
		}
		mapping[old] = id
		touched[old], touched[id] = true, true
	}
	// The build's stacks holding a renamed frame get a stack with the
	// resolved frames (an existing one, or a new entry); other builds keep
	// theirs, since stacks are shared.
	type stackRow struct {
		id     int32
		frames []int32
	}
	var affected []stackRow
	srows, err := tx.QueryContext(ctx, "SELECT stack_id, stack_frame_ids FROM "+tb.StackDict+" WHERE "+buildStacks+" AND list_has_any(stack_frame_ids, "+intList(keys(mapping))+") ORDER BY stack_id", full)
	if err != nil {
		return nil, fmt.Errorf("find stacks: %w", err)
	}
	for srows.Next() {
		var r stackRow
		var ids []any
		if err := srows.Scan(&r.id, &ids); err != nil {
			srows.Close()
			return nil, fmt.Errorf("find stacks: %w", err)
		}
		for _, v := range ids {
			n, _ := v.(int32)
			r.frames = append(r.frames, n)
		}
		affected = append(affected, r)
	}
	srows.Close()
	var maxStack int32
	if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(stack_id), 0) FROM "+tb.StackDict).Scan(&maxStack); err != nil {
		return nil, fmt.Errorf("read stack IDs: %w", err)
	}
	var cases strings.Builder
	var oldStacks []int32
	for _, r := range affected {
		renamed := make([]int32, len(r.frames))
		for i, f := range r.frames {
			touched[f] = true
			renamed[i] = f
			if to, ok := mapping[f]; ok {
				renamed[i] = to
			}
		}
		var to int32
		err := tx.QueryRowContext(ctx, "SELECT stack_id FROM "+tb.StackDict+" WHERE stack_frame_ids = "+intList(renamed)).Scan(&to)
		if errors.Is(err, sql.ErrNoRows) {
			maxStack++
			to = maxStack
			_, err = tx.ExecContext(ctx, "INSERT INTO "+tb.StackDict+" VALUES (?, "+intList(renamed)+")", to)
		}
		if err != nil {
			return nil, fmt.Errorf("stack %d: %w", r.id, err)
		}
		fmt.Fprintf(&cases, " WHEN %d THEN %d", r.id, to)
		oldStacks = append(oldStacks, r.id)
	}
	if len(oldStacks) > 0 {
		for _, t := range tb.Rows {
			if _, err := tx.ExecContext(ctx, "UPDATE "+t+" SET stack_id = CASE stack_id"+cases.String()+" ELSE stack_id END WHERE "+ofBuild+" AND stack_id IN "+inList(oldStacks), full); err != nil {
				return nil, fmt.Errorf("rewrite stacks of %s: %w", t, err)
			}
		}
		// Old stacks no other build uses are gone, as retention would
		// remove them.
		var used []string
		for _, t := range tb.Rows {
			used = append(used, "SELECT stack_id FROM "+t)
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM "+tb.StackDict+" WHERE stack_id IN "+inList(oldStacks)+" AND stack_id NOT IN ("+strings.Join(used, " UNION ")+")"); err != nil {
			return nil, fmt.Errorf("delete replaced stacks: %w", err)
		}
	}
	// The frames touched that no stack names any more go.
	if _, err := tx.ExecContext(ctx, "DELETE FROM "+tb.Frames+" WHERE frame_id IN "+inList(keys(touched))+
		" AND frame_id NOT IN (SELECT DISTINCT unnest(stack_frame_ids) FROM "+tb.StackDict+")"); err != nil {
		return nil, fmt.Errorf("delete unreferenced frames: %w", err)
	}
	upd := "UPDATE " + tb.Binaries + " SET has_debug_info = true WHERE build_id = ?"
	args := []any{full}
	if tb.HasSymbolStorage {
		upd = "UPDATE " + tb.Binaries + " SET has_debug_info = true, symbol_storage = ? WHERE build_id = ?"
		args = []any{req.symbolsPath, full}
	}
	if _, err := tx.ExecContext(ctx, upd, args...); err != nil {
		return nil, fmt.Errorf("record debug info: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	return res, nil
}

// keys returns m's keys, sorted.
func keys[V any](m map[int32]V) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// intList is ids as an INTEGER[] literal; inList as an IN list. They are
// integers we read, so building the text is safe.
func intList(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return "[" + strings.Join(parts, ",") + "]::INTEGER[]"
}

func inList(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// strings1 reads a one-column string result.
func strings1(ctx context.Context, db *sql.DB, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
