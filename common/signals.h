// Clean shutdown of daemons on SIGTERM / SIGINT without signal handlers: the signals are blocked in
// every thread (call BlockShutdownSignals() first in main, before any thread starts) and the main
// thread waits for one with WaitForShutdownSignal(), then shuts down in order.
#ifndef PS_COMMON_SIGNALS_H_
#define PS_COMMON_SIGNALS_H_

namespace ps {

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and every thread it starts later.
void BlockShutdownSignals();

// Waits until one of the blocked signals arrives and returns its number.
int WaitForShutdownSignal();

}  // namespace ps

#endif  // PS_COMMON_SIGNALS_H_
