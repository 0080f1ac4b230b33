// The serving daemon's side of running as a service (systemd/dsfs@.service, Type=notify).
//
// A ServiceMonitor owns one background thread that, while the FUSE session loop serves:
//  - tells systemd the mount is ready (sd_notify "READY=1") once a statfs of the mountpoint,
//    sent through the kernel, has been answered by this daemon: only then can a unit ordered
//    after this one read files;
//  - sends "STATUS=" lines (requests served, cache fill) every `status_interval`, and calls
//    Options::on_interval as often (-o metrics_file);
//  - reopens the log file when SIGHUP arrives (logrotate), which never ends the daemon;
//  - logs the counts of repeated messages held back by RepeatedLog().
// Stopping() sends "STOPPING=1". Without $NOTIFY_SOCKET (or with notify off) nothing is sent.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace dsfs {

class ServiceMonitor {
 public:
  struct Options {
    std::string mountpoint;  // absolute path of the mount the session serves
    bool notify = false;     // send sd_notify messages (the foreground daemon does)
    std::chrono::milliseconds status_interval{5000};
    // What statfs of the mountpoint reports once the mount answers: FUSE's magic, or EROFS's
    // for a -o kernel mount.
    uint64_t fs_magic = 0x65735546;  // FUSE_SUPER_MAGIC
    // Called from the monitor thread once it starts (after the readiness probe) and every
    // status_interval after, until Stopping: the metrics file's writer (mount/metrics.h).
    std::function<void()> on_interval;
  };
  // `status` returns the text of a STATUS= line; called from the monitor thread.
  ServiceMonitor(Options options, std::function<std::string()> status);
  ~ServiceMonitor();
  ServiceMonitor(const ServiceMonitor&) = delete;
  ServiceMonitor& operator=(const ServiceMonitor&) = delete;

  // Installs the SIGHUP handler (replacing libfuse's, which would end the session) and starts
  // the thread. REQUIRES: the mount exists and the session loop starts right after this call
  // (the readiness probe waits for the loop to answer it). At most one monitor per process.
  [[nodiscard]] Status Start();
  // Sends STOPPING=1 (once). READY=1 is never sent after it. Call when the session loop ends.
  void Stopping();
  // Ends the thread and restores SIGHUP's previous handler. REQUIRES: the session no longer
  // answers (unmounted or its device closed), so a readiness probe still waiting fails.
  void Stop();

 private:
  void Run();
  void Notify(const std::string& message);

  Options options_;
  std::function<std::string()> status_;
  std::thread thread_;
  int wake_read_ = -1, wake_write_ = -1;  // self-pipe: 'h' = SIGHUP, 'q' = stop
  std::mutex mu_;                         // guards stopping_ and ready_sent_
  bool stopping_ = false;
  bool ready_sent_ = false;
  bool started_ = false;
};

}  // namespace dsfs
