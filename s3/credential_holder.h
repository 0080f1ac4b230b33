// The credentials an S3 client signs with, kept fresh: a holder of one immutable
// AwsCredentials (key, secret and token always from the same fetch) that a refresher thread
// replaces before it expires.
//
// Refresh: credentials with an Expiration are fetched again at Expiration minus a margin (a
// quarter of their lifetime, at most 5 minutes, at least 1 s before). Readers are never
// blocked by a refresh: they take the current snapshot (a shared_ptr) and sign with it. A
// failed refresh keeps the old credentials until they expire (logged once: "refresh failed,
// keeping the current ones until ..."), and is retried every 5 s (sooner, at least 1 s apart,
// while the current keys have under 10 s left); success after a
// failure is logged once too. Long-term keys (no Expiration) are never refreshed.
//
// Keys that arrive expired or about to expire (kMinCredentialLifetimeS: a clock ahead of the
// source's) are a failed refresh, logged as above with the clocks named.
//
// ExpiredToken: a request answered 403 ExpiredToken calls RefreshNow with the snapshot it
// signed with; if no newer snapshot has arrived since, the holder fetches at once (one fetch
// for any number of callers; none while a failed refresh's retry is not due) and every caller
// resends once with the result. Such fetches are kForcedRefreshEveryS apart at least: keys S3
// refuses as soon as they come (its clock ahead of ours, a revoked session) would otherwise
// have every failed read call the source; that case is logged (warn, once a minute).
//
// Thread safety: every method may be called from any thread at once. Lock order: fetch_mu_
// before mu_.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "s3/credential_parse.h"
#include "s3/credential_providers.h"

namespace dsfs {

class CredentialHolder {
 public:
  // Unix seconds now; a test may substitute its own clock.
  using Clock = std::function<int64_t()>;

  // Fixed credentials (long-term keys, or what a test gives): no refresher.
  static std::shared_ptr<CredentialHolder> Fixed(AwsCredentials credentials);
  // No credentials at all: requests go unsigned (-o s3_anonymous).
  static std::shared_ptr<CredentialHolder> Anonymous();
  // Credentials from `provider`, `first` being what it gave last; a refresher thread runs if
  // `first` expires.
  static std::shared_ptr<CredentialHolder> Refreshing(std::unique_ptr<CredentialProvider> provider,
                                                      AwsCredentials first, Clock clock = {});
  ~CredentialHolder();  // stops the refresher
  CredentialHolder(const CredentialHolder&) = delete;
  CredentialHolder& operator=(const CredentialHolder&) = delete;

  // The current credentials; nullptr if anonymous.
  std::shared_ptr<const AwsCredentials> Get() const;
  // The credentials the holder was made with (nullptr if anonymous); never changes.
  const std::shared_ptr<const AwsCredentials>& initial() const { return initial_; }
  bool anonymous() const { return anonymous_; }
  // "environment", "profile ml, credential_process", ... ("none" if anonymous).
  const std::string& source() const { return source_; }

  // After `used` was refused as expired: fetches now unless a newer snapshot than `used` has
  // arrived, and returns the current one (perhaps still `used` if the fetch failed).
  std::shared_ptr<const AwsCredentials> RefreshNow(
      const std::shared_ptr<const AwsCredentials>& used);
  static constexpr int64_t kForcedRefreshEveryS = 5;
  // Keys living less than this are refreshed every few seconds: logged once (warn).
  static constexpr int64_t kShortLifetimeS = 60;

  // Counters (tests, stats): successful and failed fetches after the first.
  uint64_t refreshes() const;
  uint64_t failed_refreshes() const;

  // When, in Unix seconds, credentials fetched at `fetched_s` and expiring at `expiration_s`
  // are refreshed (the margin rule above). Exposed for the unit test.
  static int64_t RefreshAt(int64_t fetched_s, int64_t expiration_s);

 private:
  CredentialHolder() = default;
  void Run();
  // Fetches from provider_; installs the result or records the failure. REQUIRES: fetch_mu_.
  bool FetchLocked();
  int64_t Now() const;

  bool anonymous_ = false;
  std::string source_;
  std::unique_ptr<CredentialProvider> provider_;  // null: fixed
  std::shared_ptr<const AwsCredentials> initial_;
  Clock clock_;
  std::mutex fetch_mu_;    // one fetch at a time
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::shared_ptr<const AwsCredentials> current_;
  int64_t fetched_s_ = 0;
  int64_t next_s_ = 0;  // when the refresher fetches next
  bool failing_ = false;
  int64_t forced_s_ = INT64_MIN / 2;  // the last fetch RefreshNow made
  int64_t refused_warned_s_ = INT64_MIN / 2;
  bool short_warned_ = false;  // keys that lived under kShortLifetimeS were logged
  bool stop_ = false;
  uint64_t refreshes_ = 0, failed_ = 0;
  std::thread thread_;
};

}  // namespace dsfs
