package main

import (
	"context"
	"database/sql"
	"debug/elf"
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
	"github.com/hotpath-dev/hotpath/internal/debuginfod"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
)

const symbolizeExamples = `  # after the binary was stripped or deleted: resolve its stored addresses with the debug file
  hotpath symbolize --build-id 1f0e9d8c7b6a --symbols ./app.debug
  hotpath symbolize --local --symbols /usr/lib/debug/.build-id/1f/0e9d8c7b6a.debug --dry-run
  # every stored build with unresolved frames, from debuginfod servers
  DEBUGINFOD_URLS=https://debuginfod.debian.net hotpath symbolize --debuginfod
  hotpath symbolize --build-id 1f0e9d8c7b6a --debuginfod-urls https://debuginfod.ubuntu.com
  # stop the collector first: rewriting the frame dictionary needs the only handle on the file
`

// newSymbolizeCommand resolves the "file+0xOFF" frames that a build's
// stacks stored because no symbols were available at sampling time (RFD 072
// delayed symbolization), and rewrites them in place.
func newSymbolizeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "symbolize (--symbols FILE | --debuginfod) [--build-id B] [--db FILE] [flags]",
		Short:   "resolve stored raw addresses of a build with a debug/symbol file, or of every build from debuginfod",
		Example: symbolizeExamples,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	db := fs.String("db", os.Getenv("HOTPATH_DB"), "DuckDB file to rewrite (default: the gateway's file, or the agent's with --local; see hotpath profile --help)")
	local := fs.Bool("local", false, "the agent's file instead of the gateway's")
	build := fs.String("build-id", "", "build ID (or a unique prefix) whose raw addresses to resolve (default: the --symbols file's; with --debuginfod, every stored build with a GNU build ID)")
	symbols := fs.String("symbols", "", "ELF file with symbols for that build: the unstripped binary or its separate debug file")
	useDebuginfod := fs.Bool("debuginfod", false, "fetch each build's debug file from the debuginfod servers in $DEBUGINFOD_URLS (cached where elfutils' client caches: $DEBUGINFOD_CACHE_PATH or ~/.cache/debuginfod_client)")
	debuginfodURLs := fs.String("debuginfod-urls", "", "debuginfod servers, separated by spaces, instead of $DEBUGINFOD_URLS (implies --debuginfod)")
	executable := fs.String("executable", "", "with --symbols FILE a separate debug file: the binary the frames were sampled in (stripped or not), whose program headers place them (default: the recorded binary path, if that file is the build)")
	binary := fs.String("binary", "", "file name in the raw frames (\"app\" in app+0x1a2b); default: from the build's binary metadata")
	force := fs.Bool("force", false, "use --symbols even when its build ID differs from --build-id")
	dryRun := fs.Bool("dry-run", false, "print what would be renamed, change nothing")
	_ = cmd.MarkFlagFilename("symbols")
	_ = cmd.MarkFlagFilename("executable")
	_ = cmd.MarkFlagFilename("db", "duckdb")
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		fetch := *useDebuginfod || *debuginfodURLs != ""
		switch {
		case *symbols == "" && !fetch:
			return usagef("give --symbols FILE or --debuginfod")
		case *symbols != "" && fetch:
			return usagef("--symbols and --debuginfod exclude each other")
		case *binary != "" && *build == "" && fetch:
			return usagef("--binary names one build's frames: give --build-id too")
		case *executable != "" && *symbols == "":
			return usagef("--executable goes with --symbols (debuginfod serves the executable itself)")
		}
		return symbolizeBuild(cmd.Context(), symbolizeRequest{db: *db, local: *local, build: *build, symbols: *symbols, executable: *executable,
			debuginfod: fetch, debuginfodURLs: *debuginfodURLs,
			binary: *binary, force: *force, dryRun: *dryRun}, cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}

// symbolizeRequest is symbolize's command line.
type symbolizeRequest struct {
	db, build, symbols, executable, binary, debuginfodURLs string
	local, force, dryRun, debuginfod                       bool
}

func symbolizeBuild(ctx context.Context, req symbolizeRequest, stdout, stderr io.Writer) error {
	what := "loading " + req.symbols + " and rewriting frames"
	if req.debuginfod {
		what = "fetching debug files and rewriting frames"
	}
	stopProgress := startProgress(stderr, what, 0)
	defer stopProgress()
	path := req.db
	if path == "" {
		path = profilequery.DefaultFile(req.local, "")
	}
	if profilequery.IsEndpoint(path) {
		return fmt.Errorf("--db %s is an endpoint: symbolize rewrites the file, so it needs the file path, with no collector running", path)
	}
	var symbols symbolSource
	if req.debuginfod {
		client, err := debuginfod.FromEnv(req.debuginfodURLs)
		if err != nil {
			return err
		}
		symbols = fromDebuginfod(ctx, client)
	} else {
		table, err := symbolize.OpenSymbolTable(req.symbols)
		if err != nil {
			return err
		}
		info, err := buildid.Read(req.symbols)
		if err != nil {
			return fmt.Errorf("read build ID of --symbols: %w", err)
		}
		if req.build == "" {
			req.build = info.Canonical()
		}
		symbols = fromFile(req.symbols, req.executable, table, info, req.force)
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

	verb := "renamed"
	if req.dryRun {
		verb = "would rename"
	}
	report := func(res *rewriteResult) {
		for _, r := range res.renamed {
			fmt.Fprintf(stdout, "%s -> %s\n", r[0], r[1])
		}
		fmt.Fprintf(stdout, "build %s: %s %d of %d raw frames (%d did not resolve) in %s\n", res.build, verb, len(res.renamed), res.raw, res.raw-len(res.renamed), path)
	}
	if req.build != "" {
		res, err := rewriteFrames(ctx, sdb, rewriteRequest{build: req.build, binary: req.binary, dryRun: req.dryRun, symbols: symbols})
		if err != nil {
			return err
		}
		stopProgress()
		report(res)
		return nil
	}

	// Every stored build debuginfod can be asked about: one transaction
	// each, so a build that fails leaves the others' work in place.
	builds, err := storedGNUBuilds(ctx, sdb)
	if err != nil {
		return err
	}
	var symbolized, unresolved, clean, notFound int
	var failed []string
	for _, b := range builds {
		res, err := rewriteFrames(ctx, sdb, rewriteRequest{build: b, stored: true, dryRun: req.dryRun, symbols: symbols})
		switch {
		case errors.Is(err, debuginfod.ErrNotFound):
			notFound++
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failed = append(failed, err.Error())
		case res.raw == 0:
			clean++
		case len(res.renamed) == 0:
			unresolved++
			report(res)
		default:
			symbolized++
			stopProgress()
			report(res)
		}
	}
	stopProgress()
	for _, f := range failed {
		fmt.Fprintln(stderr, "hotpath symbolize:", f)
	}
	fmt.Fprintf(stdout, "%d builds with a GNU build ID: %d symbolized, %d whose symbols named none of their raw frames, %d without raw frames, %d on no debuginfod server, %d failed\n",
		len(builds), symbolized, unresolved, clean, notFound, len(failed))
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d builds failed (above)", len(failed), len(builds))
	}
	return nil
}

// symbolSource gives what resolves a build's file offsets to function
// names, and the file that holds its symbols. It is called only for a
// build with raw frames, so nothing is fetched for the others; recorded is
// the binary's path on the node where it was sampled ("" when unknown).
type symbolSource func(build, recorded string) (resolve func(fileOffset uint64) (string, bool), file string, err error)

// fromFile is --symbols: one file, for the build it says it is (force: any).
// A separate debug file places the frames' file offsets with the binary's
// own program headers: from executable, else the recorded path when the
// file there is this build.
func fromFile(path, executable string, table *symbolize.SymbolTable, info buildid.Info, force bool) symbolSource {
	return func(full, recorded string) (func(uint64) (string, bool), string, error) {
		if !force && full != info.GNU && full != info.Go && (info.SHA256 == "" || full != buildid.SHA256Prefix+info.SHA256) {
			return nil, "", fmt.Errorf("--symbols %s has build ID %q, not %q: it is another build (--force to use it anyway)", path, info.Canonical(), full)
		}
		layout := table.Segments
		if !layout.HasText() {
			exe, err := layoutFile(executable, recorded, full, force)
			if err != nil {
				return nil, "", fmt.Errorf("--symbols %s is a separate debug file, which does not say where the binary's code is in the file: %w", path, err)
			}
			if layout, err = segmentsOf(exe); err != nil {
				return nil, "", err
			}
		}
		return tableResolver(table, layout), path, nil
	}
}

// layoutFile picks the binary whose program headers place a debug file's
// build: --executable, else the recorded path if that file is the build.
func layoutFile(executable, recorded, full string, force bool) (string, error) {
	if executable != "" {
		if !force && !isBuild(executable, full) {
			return "", fmt.Errorf("--executable %s is not build %s (--force to use it anyway)", executable, full)
		}
		return executable, nil
	}
	if recorded != "" && isBuild(recorded, full) {
		return recorded, nil
	}
	return "", fmt.Errorf("give the binary the frames were sampled in as --executable (the stripped one will do; %q is not here or is another build), or use --debuginfod", recorded)
}

func isBuild(path, full string) bool {
	info, err := buildid.Read(path)
	return err == nil && (info.Canonical() == full || info.GNU == full || info.Go == full)
}

func segmentsOf(path string) (symbolize.Segments, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return symbolize.Segments{}, fmt.Errorf("read program headers: %w", err)
	}
	defer ef.Close()
	s := symbolize.NewSegments(ef.Progs)
	if !s.HasText() {
		return s, fmt.Errorf("%s has no executable segment with file data", path)
	}
	return s, nil
}

// fromDebuginfod fetches each build's debug file (the client checks its
// build ID) and reads its symbols. A separate debug file does not place the
// frames' file offsets: the recorded binary does when it is here and is the
// build (run on the node), else the executable is fetched too. A server
// that has no debug file may index the unstripped executable, which is
// then both.
func fromDebuginfod(ctx context.Context, client *debuginfod.Client) symbolSource {
	return func(full, recorded string) (func(uint64) (string, bool), string, error) {
		if !debuginfod.IsGNUBuildID(full) {
			return nil, "", fmt.Errorf("build %s has no GNU build ID, which debuginfod servers need: give its --symbols file", full)
		}
		path, err := client.Fetch(ctx, full, debuginfod.DebugInfo)
		if errors.Is(err, debuginfod.ErrNotFound) {
			path, err = client.Fetch(ctx, full, debuginfod.Executable)
		}
		if err != nil {
			return nil, "", err
		}
		table, err := symbolize.OpenSymbolTable(path)
		if err != nil {
			return nil, "", err
		}
		layout := table.Segments
		if !layout.HasText() {
			exe := recorded
			if exe == "" || !isBuild(exe, full) {
				if exe, err = client.Fetch(ctx, full, debuginfod.Executable); err != nil {
					return nil, "", fmt.Errorf("its debug file does not say where the code is in the binary, and %w", err)
				}
			}
			if layout, err = segmentsOf(exe); err != nil {
				return nil, "", err
			}
		}
		return tableResolver(table, layout), path, nil
	}
}

// tableResolver names a file offset: layout turns it into the address the
// table's symbols use.
func tableResolver(table *symbolize.SymbolTable, layout symbolize.Segments) func(uint64) (string, bool) {
	return func(off uint64) (string, bool) {
		addr, ok := layout.FileAddr(off)
		if !ok {
			return "", false
		}
		sym, ok := table.Lookup(addr)
		return sym.Function, ok && sym.Function != ""
	}
}

// storedGNUBuilds lists the builds the file's rows name that have a GNU
// build ID (the ones debuginfod servers index).
func storedGNUBuilds(ctx context.Context, db *sql.DB) ([]string, error) {
	var tierName string
	if err := db.QueryRowContext(ctx, "SELECT tier FROM schema_version").Scan(&tierName); err != nil {
		return nil, fmt.Errorf("read schema_version (is it a hotpath file?): %w", err)
	}
	tb := profilequery.TablesOf(profilequery.Tier(tierName))
	var allSeries []string
	for _, t := range tb.Rows {
		allSeries = append(allSeries, "SELECT series_id FROM "+t)
	}
	all, err := strings1(ctx, db, "SELECT DISTINCT build_id FROM "+tb.Series+" WHERE series_id IN ("+strings.Join(allSeries, " UNION ")+") AND build_id <> '' ORDER BY 1")
	if err != nil {
		return nil, fmt.Errorf("list builds: %w", err)
	}
	var out []string
	for _, b := range all {
		if debuginfod.IsGNUBuildID(b) {
			out = append(out, b)
		}
	}
	return out, nil
}

type rewriteRequest struct {
	build, binary string
	// stored says build is a whole build ID read from the file's rows
	// (storedGNUBuilds), not a prefix to resolve.
	stored  bool
	dryRun  bool
	symbols symbolSource
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
	builds := []string{req.build}
	if !req.stored {
		var err error
		builds, err = strings1(ctx, db, "SELECT DISTINCT build_id FROM "+tb.Series+" WHERE series_id IN ("+strings.Join(allSeries, " UNION ")+") AND build_id <> '' AND starts_with(build_id, ?) ORDER BY 1", req.build)
		if err != nil {
			return nil, fmt.Errorf("find build: %w", err)
		}
	}
	switch {
	case len(builds) == 0:
		return nil, fmt.Errorf("no stored stacks of build ID %q", req.build)
	case len(builds) > 1:
		return nil, fmt.Errorf("build ID prefix %q matches %s: give more of it", req.build, strings.Join(builds, ", "))
	}
	full := builds[0]
	// The build's stacks: stack IDs its rows point to.
	buildStacks := "stack_id IN (" + strings.Join(buildRows, " UNION ") + ")"
	paths, err := strings1(ctx, db, "SELECT binary_path FROM "+tb.Binaries+" WHERE build_id = ? AND binary_path <> ''", full)
	if err != nil {
		return nil, fmt.Errorf("read binary metadata: %w", err)
	}
	recorded := ""
	if len(paths) > 0 {
		recorded = paths[0]
	}
	base := req.binary
	if base == "" {
		if len(paths) == 0 {
			return nil, fmt.Errorf("no binary path recorded for build %s: give --binary NAME (the file name in its raw frames, e.g. app for app+0x1a2b)", full)
		}
		base = filepath.Base(paths[0])
	}
	prefix := profileschema.RawFramePrefix(base)
	// No frame of that file anywhere in the dictionary: the build has none,
	// and its rows (tens of millions over a month) need no scan.
	var candidates int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+tb.Frames+" WHERE starts_with(frame_name, ?)", prefix).Scan(&candidates); err != nil {
		return nil, fmt.Errorf("find raw frames: %w", err)
	}
	if candidates == 0 {
		return &rewriteResult{build: full}, nil
	}

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
	if len(raws) == 0 {
		return res, nil
	}
	resolve, symbolsPath, err := req.symbols(full, recorded)
	if err != nil {
		return nil, err
	}
	newName := map[int32]string{}
	for _, r := range raws {
		off, err := strconv.ParseUint(strings.TrimPrefix(r.name, prefix), 16, 64)
		if err != nil {
			continue // not an offset after all ("app+0xzz"): leave it
		}
		if name, ok := resolve(off); ok {
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
		args = []any{symbolsPath, full}
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
