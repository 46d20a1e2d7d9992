// Package sim is a deterministic simulation of taskbridge's engine: the
// real router and workflow bridge (a builder.Server), on a simulated clock
// and a store that outlives its processes (memory, or bbolt in a temporary
// directory), driven by a plan of operations drawn from one seed, with
// faults injected, and named invariants checked after every operation.
// FoundationDB's simulation and TigerBeetle's VOPR are the models; the
// same machinery (World, Clock, Disk) carries the public test kit,
// package workflowtest.
//
// # What is deterministic, and what is not
//
// The plan is: Generate draws it from the seed alone, each operation
// carrying picks it resolves against the world as it finds it (the
// picks-th task among those that can take it, in a stable order), so a
// plan replays exactly and a shorter one (a shrink) is still a plan. So
// is every tool's behaviour: whether a call succeeds, fails, is held
// until an operation releases it, or hangs, is a hash of the seed, the
// task's handle (t<At>: the place, in the plan it was drawn in, of the
// operation that started it, which a shrunk plan keeps), the step's path
// and how many calls of that step came before. The clock is: the engine reads
// Clock, which only the simulation moves (to each wake-up on the way when
// time passes). Go's goroutines are not: the engine's own concurrency
// (its drive loops, the scheduler, its background services) may
// interleave differently from one run to the next. The simulation does
// not hide that: after each operation it waits until the engine rests (by
// condition: no store call or tool call in progress, held calls aside,
// no task due, expired or silent, and no write for a few looks in a row;
// never by sleeping a fixed time), and the invariants must hold for every
// interleaving. A failure prints its seed and the shortest plan found to
// show it (Shrink: delta debugging over the plan, keeping only what was
// seen to fail).
//
// # Faults
//
// A process crashes between any two store writes (Conn.CrashAfter: the
// write is not made and neither is anything after it; the process is
// closed and the next one recovers from the Disk), or now; it stops
// gracefully (a deploy of the same code, or of other versions of a
// workflow); the store refuses one write; reads of the wake index find
// nothing (lost wake-ups). Clients call right, wrong, twice and late;
// events come early, twice and late; tasks are cancelled, paused (with
// their work cut, or not) and resumed; time jumps up to three days.
//
// # Invariants
//
// invariants.go names them and says where each is checked: every write
// against the task's previous write, every tool call as it starts, every
// moment the engine rests. Tools record their calls (task, step, attempt,
// idempotency key, outcome) in a ledger the invariants read. Known lists
// the invariants that fail today for a named reason (issue 38's items;
// bugs found here in files issue 38's branch reshapes): the test reports
// them and fails on every other.
//
// # Seams
//
// The simulation needs no hook inside the engine: taskrouter.Options.Now
// is its clock (SweepInterval, the scheduler's and sweeper's tick, is set
// to Tick of real time, so a wake-up the clock reached runs at once), a
// store.Store wrapper (Conn) injects the store's faults and observes every
// write, builder.Server.Close is the graceful stop, and the tools read
// the step they perform with workflow.StepFrom. Step timeouts and
// heartbeats run on real time (short ones, here).
//
// # Files
//
//	clock.go      Clock, the simulated clock
//	disk.go       Disk (the store that outlives processes, its write log) and Conn (a process's faulty connection)
//	world.go      World and Process: a server's life across processes (Start, Stop, Crash), Settle, Advance
//	catalog.go    the workflows a simulation runs, their tools' specs, queues and deploys
//	tools.go      the simulated tools, held calls, tool behaviour from the seed
//	ledger.go     the ledger of tool calls
//	records.go    reading a workflow task's records
//	ops.go        operations, plans, Generate, ParsePlan, FormatPlan
//	apply.go      applying an operation (the client's calls through a go-sdk client)
//	sim.go        Config, Result, Run, waiting until the engine rests, task handles
//	invariants.go the invariants and Violation
//	known.go      Known: the invariants that fail today, and why
//	shrink.go     Shrink
package sim
