//! The state of a simulated Redfish service: hosts, accounts, sessions, tasks and statistics.
//! Routes only translate HTTP to calls on [`RedfishService`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::clock::Clock;
use crate::host::{Power, PowerAction, SimHost};
use crate::lockout::{LockoutCounter, LockoutPolicy, LockoutStatus};

/// A predefined Redfish role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Everything.
    Administrator,
    /// May operate components, including power.
    Operator,
    /// May only read.
    ReadOnly,
}

impl Role {
    /// The role id.
    pub fn id(self) -> &'static str {
        match self {
            Role::Administrator => "Administrator",
            Role::Operator => "Operator",
            Role::ReadOnly => "ReadOnly",
        }
    }

    /// The Redfish privileges the role grants.
    pub fn privileges(self) -> &'static [&'static str] {
        match self {
            Role::Administrator => &[
                "Login",
                "ConfigureManager",
                "ConfigureUsers",
                "ConfigureSelf",
                "ConfigureComponents",
            ],
            Role::Operator => &["Login", "ConfigureSelf", "ConfigureComponents"],
            Role::ReadOnly => &["Login", "ConfigureSelf"],
        }
    }

    /// Whether the role may reset systems or change their settings.
    pub fn may_configure_components(self) -> bool {
        self.privileges().contains(&"ConfigureComponents")
    }

    /// Whether the role may create, change and delete other accounts.
    pub fn may_configure_users(self) -> bool {
        self.privileges().contains(&"ConfigureUsers")
    }

    /// Every role.
    pub const ALL: [Role; 3] = [Role::Administrator, Role::Operator, Role::ReadOnly];

    /// The role with this id.
    pub fn from_id(id: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.id() == id)
    }
}

/// A BMC account.
#[derive(Clone, PartialEq, Eq)]
pub struct Account {
    /// The account's login name.
    pub username: String,
    /// Its password.
    pub password: String,
    /// Its role.
    pub role: Role,
}

impl std::fmt::Debug for Account {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Account")
            .field("username", &self.username)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// An account as the account service shows it: no password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AccountRecord {
    /// The member id in `/redfish/v1/AccountService/Accounts/{id}`.
    pub id: String,
    pub username: String,
    pub role: Role,
    pub enabled: bool,
    /// The built-in Administrator (the configured account): it cannot be deleted, disabled or
    /// given another role.
    pub built_in: bool,
    /// The current ETag, which changes with every write.
    pub etag: String,
    /// Locked out by failed logins.
    pub locked: bool,
}

/// A change to an account; `None` leaves a property as it is.
#[derive(Default)]
pub(crate) struct AccountChange {
    pub username: Option<String>,
    pub password: Option<String>,
    pub role: Option<Role>,
    pub enabled: Option<bool>,
}

impl AccountChange {
    pub(crate) fn is_empty(&self) -> bool {
        self.username.is_none()
            && self.password.is_none()
            && self.role.is_none()
            && self.enabled.is_none()
    }
}

/// Why an account could not be created, changed or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AccountError {
    NotFound,
    /// The account changed since the ETag the request was checked against.
    PreconditionFailed,
    UserNameTaken,
    LimitReached,
    /// The built-in Administrator keeps this property (`RoleId`, `Enabled`).
    NotWritable(&'static str),
    /// The built-in Administrator cannot be deleted.
    BuiltIn,
}

/// The most accounts a simulated BMC holds (BMCs have a fixed number of slots).
pub const MAX_ACCOUNTS: usize = 16;

#[derive(Debug, Clone)]
struct AccountEntry {
    id: u64,
    account: Account,
    enabled: bool,
    /// Service-wide write counter at the last write: ETags never repeat, not even for an id
    /// reused after a delete.
    generation: u64,
    /// Failed logins and the lock they cause.
    lockout: LockoutCounter,
}

impl AccountEntry {
    fn record(&self, first: bool) -> AccountRecord {
        AccountRecord {
            id: self.id.to_string(),
            username: self.account.username.clone(),
            role: self.account.role,
            enabled: self.enabled,
            built_in: first,
            etag: format!("W/\"{}\"", self.generation),
            locked: false,
        }
    }
}

/// Who made a request.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The account name.
    pub username: String,
    /// Its role.
    pub role: Role,
}

#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub id: String,
    pub username: String,
    last_used: Duration,
}

#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub id: u64,
    pub host: Arc<SimHost>,
    pub reset_type: String,
}

/// One reset a client sent, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetRecord {
    /// The system id.
    pub system: String,
    /// The ResetType sent.
    pub reset_type: String,
}

/// Counters of what clients did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests received (control API excluded).
    pub requests: u64,
    /// The most requests ever handled at the same time.
    pub max_in_flight: u64,
    /// Sessions currently open.
    pub open_sessions: usize,
    /// Logins tried (session creations with sessions on), accepted or refused: what a
    /// client that must not retry a refused login is counted by.
    #[serde(default)]
    pub logins: u64,
    /// Sessions created so far.
    pub sessions_created: u64,
    /// Sessions deleted by clients.
    pub sessions_deleted: u64,
    /// Refused logins and refused credentials.
    pub authentication_failures: u64,
    /// Every reset received, in order.
    pub resets: Vec<ResetRecord>,
}

/// Service-wide switches, settable at runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// Accept `Authorization: Basic`. Off means sessions only.
    pub basic_auth: bool,
    /// Offer the session service. Off means Basic only (the service root does not link it).
    pub sessions: bool,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            basic_auth: true,
            sessions: true,
        }
    }
}

#[derive(Debug)]
struct ServiceState {
    /// In id order; the first is the built-in Administrator.
    accounts: Vec<AccountEntry>,
    next_account: u64,
    account_writes: u64,
    auth: AuthSettings,
    lockout: LockoutPolicy,
    sessions: HashMap<String, Session>,
    next_session: u64,
    tasks: HashMap<u64, Task>,
    next_task: u64,
    logins: u64,
    sessions_created: u64,
    sessions_deleted: u64,
    authentication_failures: u64,
    resets: Vec<ResetRecord>,
    /// Every session token ever issued, for tests that look for leaked tokens.
    issued: Vec<String>,
    /// Paths answered with a redirect instead of their resource (see
    /// [`RedfishService::redirect`]).
    redirects: HashMap<String, Redirect>,
}

/// A redirect the service answers a path with, as a BMC behind a front end or one that moved
/// a resource does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redirect {
    /// 301, 302, 303, 307 or 308.
    pub status: u16,
    /// The `Location` header, sent as given (relative or absolute, any origin).
    pub location: String,
}

/// Why a login or a request's credentials were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoginError {
    BadCredentials,
    TooManySessions,
    SessionsDisabled,
}

/// A simulated Redfish service.
#[derive(Debug)]
pub struct RedfishService {
    hosts: Vec<Arc<SimHost>>,
    clock: Arc<dyn Clock>,
    uuid: String,
    session_timeout: Duration,
    max_sessions: usize,
    state: Mutex<ServiceState>,
    random: SystemRandom,
    requests: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
}

/// The session table of one simulated BMC.
pub const SESSIONS_PER_BMC: usize = 64;

impl RedfishService {
    /// A service in front of `hosts` with one Administrator account.
    pub fn new(hosts: Vec<Arc<SimHost>>, admin: Account, clock: Arc<dyn Clock>) -> Self {
        let max_sessions = SESSIONS_PER_BMC * hosts.len().max(1);
        RedfishService {
            hosts,
            clock,
            uuid: "5a4f2e10-9b3c-4d8e-a7f1-0c2b3d4e5f60".into(),
            session_timeout: Duration::from_secs(1800),
            // One service stands in for one BMC per host, each with its own session table.
            max_sessions,
            state: Mutex::new(ServiceState {
                accounts: vec![AccountEntry {
                    id: 1,
                    account: admin,
                    enabled: true,
                    generation: 1,
                    lockout: LockoutCounter::default(),
                }],
                next_account: 2,
                account_writes: 1,
                auth: AuthSettings::default(),
                lockout: LockoutPolicy::default(),
                sessions: HashMap::new(),
                next_session: 1,
                tasks: HashMap::new(),
                next_task: 1,
                logins: 0,
                sessions_created: 0,
                sessions_deleted: 0,
                authentication_failures: 0,
                resets: Vec::new(),
                issued: Vec::new(),
                redirects: HashMap::new(),
            }),
            random: SystemRandom::new(),
            requests: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ServiceState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The service UUID.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// How long an idle session lives.
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// The hosts, in system-id order.
    pub fn hosts(&self) -> &[Arc<SimHost>] {
        &self.hosts
    }

    /// The host with this system id.
    pub fn host(&self, id: &str) -> Option<&Arc<SimHost>> {
        self.hosts.iter().find(|h| h.id() == id)
    }

    /// Adds an account (enabled), whatever the account service's limits.
    pub fn add_account(&self, account: Account) {
        let mut state = self.lock();
        Self::insert_account(&mut state, account, true);
    }

    fn insert_account(state: &mut ServiceState, account: Account, enabled: bool) -> AccountRecord {
        state.account_writes += 1;
        let entry = AccountEntry {
            id: state.next_account,
            account,
            enabled,
            generation: state.account_writes,
            lockout: LockoutCounter::default(),
        };
        state.next_account += 1;
        state.accounts.push(entry);
        let first = state.accounts.len() == 1;
        state.accounts[state.accounts.len() - 1].record(first)
    }

    /// The accounts (passwords included: this is the simulator's own view).
    pub fn accounts(&self) -> Vec<Account> {
        self.lock()
            .accounts
            .iter()
            .map(|e| e.account.clone())
            .collect()
    }

    /// Changes the first account's credentials at runtime and ends its sessions, as a BMC
    /// does when an administrator rotates the password.
    pub fn set_credentials(&self, username: &str, password: &str) {
        let mut state = self.lock();
        state.account_writes += 1;
        let generation = state.account_writes;
        let Some(entry) = state.accounts.first_mut() else {
            return;
        };
        let old = std::mem::replace(&mut entry.account.username, username.to_owned());
        entry.account.password = password.to_owned();
        entry.generation = generation;
        state.sessions.retain(|_, s| s.username != old);
    }

    /// The accounts as the account service shows them, in id order.
    pub(crate) fn account_records(&self) -> Vec<AccountRecord> {
        let state = self.lock();
        let now = self.clock.now();
        state
            .accounts
            .iter()
            .enumerate()
            .map(|(index, e)| AccountRecord {
                locked: e.lockout.is_locked(&state.lockout, now),
                ..e.record(index == 0)
            })
            .collect()
    }

    /// The lock-out policy in force.
    pub fn lockout_policy(&self) -> LockoutPolicy {
        self.lock().lockout
    }

    /// Sets the lock-out policy (the AccountService's `AccountLockout*` properties).
    pub fn set_lockout_policy(&self, policy: LockoutPolicy) {
        self.lock().lockout = policy;
    }

    /// The failed logins and lock of the account named `username`, if there is one.
    pub fn lockout_status(&self, username: &str) -> Option<LockoutStatus> {
        let mut state = self.lock();
        let now = self.clock.now();
        let policy = state.lockout;
        state
            .accounts
            .iter_mut()
            .find(|e| e.account.username == username)
            .map(|e| e.lockout.status(&policy, now))
    }

    /// One account by member id.
    pub(crate) fn account_record(&self, id: &str) -> Option<AccountRecord> {
        self.account_records().into_iter().find(|r| r.id == id)
    }

    /// Creates an enabled-or-not account; user names are unique.
    pub(crate) fn create_account(
        &self,
        account: Account,
        enabled: bool,
    ) -> Result<AccountRecord, AccountError> {
        let mut state = self.lock();
        if state
            .accounts
            .iter()
            .any(|e| e.account.username == account.username)
        {
            return Err(AccountError::UserNameTaken);
        }
        if state.accounts.len() >= MAX_ACCOUNTS {
            return Err(AccountError::LimitReached);
        }
        Ok(Self::insert_account(&mut state, account, enabled))
    }

    /// The index of account `id`, if its ETag is still `expected` (when given). The check and
    /// the write that follows happen under one lock: of two writers holding the same ETag,
    /// exactly one gets through.
    fn account_index(
        state: &ServiceState,
        id: &str,
        expected: Option<&str>,
    ) -> Result<usize, AccountError> {
        let index = state
            .accounts
            .iter()
            .position(|e| e.id.to_string() == id)
            .ok_or(AccountError::NotFound)?;
        match expected {
            Some(etag) if state.accounts[index].record(index == 0).etag != etag => {
                Err(AccountError::PreconditionFailed)
            }
            _ => Ok(index),
        }
    }

    /// Applies a change. A new user name or password, or disabling the account, ends its
    /// sessions.
    pub(crate) fn update_account(
        &self,
        id: &str,
        expected: Option<&str>,
        change: AccountChange,
    ) -> Result<AccountRecord, AccountError> {
        let mut state = self.lock();
        let index = Self::account_index(&state, id, expected)?;
        if index == 0 {
            let current = &state.accounts[0];
            if change.role.is_some_and(|role| role != current.account.role) {
                return Err(AccountError::NotWritable("RoleId"));
            }
            if change.enabled == Some(false) {
                return Err(AccountError::NotWritable("Enabled"));
            }
        }
        if let Some(name) = &change.username
            && state
                .accounts
                .iter()
                .enumerate()
                .any(|(i, e)| i != index && e.account.username == *name)
        {
            return Err(AccountError::UserNameTaken);
        }
        state.account_writes += 1;
        let generation = state.account_writes;
        let entry = &mut state.accounts[index];
        let old_name = entry.account.username.clone();
        let ends_sessions =
            change.username.is_some() || change.password.is_some() || change.enabled == Some(false);
        if let Some(username) = change.username {
            entry.account.username = username;
        }
        if let Some(password) = change.password {
            entry.account.password = password;
        }
        if let Some(role) = change.role {
            entry.account.role = role;
        }
        if let Some(enabled) = change.enabled {
            entry.enabled = enabled;
        }
        entry.generation = generation;
        let record = entry.record(index == 0);
        if ends_sessions {
            state.sessions.retain(|_, s| s.username != old_name);
        }
        Ok(record)
    }

    /// Deletes an account and ends its sessions.
    pub(crate) fn delete_account(
        &self,
        id: &str,
        expected: Option<&str>,
    ) -> Result<(), AccountError> {
        let mut state = self.lock();
        let index = Self::account_index(&state, id, expected)?;
        if index == 0 {
            return Err(AccountError::BuiltIn);
        }
        let removed = state.accounts.remove(index);
        state
            .sessions
            .retain(|_, s| s.username != removed.account.username);
        Ok(())
    }

    /// The current authentication switches.
    pub fn auth_settings(&self) -> AuthSettings {
        self.lock().auth.clone()
    }

    /// Changes the authentication switches.
    pub fn set_auth_settings(&self, settings: AuthSettings) {
        let mut state = self.lock();
        if !settings.sessions {
            state.sessions.clear();
        }
        state.auth = settings;
    }

    /// Every session token this service has issued (open or ended).
    pub fn issued_tokens(&self) -> Vec<String> {
        self.lock().issued.clone()
    }

    /// Answers every request for exactly `path` (any method, before authentication) with
    /// `redirect` from now on; `None` takes the redirect back.
    pub fn redirect(&self, path: &str, redirect: Option<Redirect>) {
        let mut state = self.lock();
        match redirect {
            Some(redirect) => state.redirects.insert(path.to_owned(), redirect),
            None => state.redirects.remove(path),
        };
    }

    /// The redirect `path` is answered with, if any.
    pub(crate) fn redirect_for(&self, path: &str) -> Option<Redirect> {
        self.lock().redirects.get(path).cloned()
    }

    /// Ends every session at once, as if they had all timed out.
    pub fn expire_sessions(&self) {
        self.lock().sessions.clear();
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let state = self.lock();
        Stats {
            requests: self.requests.load(Ordering::Relaxed),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            open_sessions: state.sessions.len(),
            logins: state.logins,
            sessions_created: state.sessions_created,
            sessions_deleted: state.sessions_deleted,
            authentication_failures: state.authentication_failures,
            resets: state.resets.clone(),
        }
    }

    /// Counts a request in; the guard counts it out.
    pub(crate) fn begin_request(&self) -> InFlight<'_> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.max_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight(self)
    }

    /// The role of `username` if `password` is its password and the account is neither
    /// disabled nor locked out; a wrong password counts towards the lock-out.
    fn check_password(
        state: &mut ServiceState,
        now: Duration,
        username: &str,
        password: &str,
    ) -> Option<Role> {
        let policy = state.lockout;
        let entry = state
            .accounts
            .iter_mut()
            .find(|e| e.enabled && e.account.username == username)?;
        if entry.lockout.locked(&policy, now) {
            entry.lockout.refused_while_locked();
            return None;
        }
        if entry.account.password != password {
            entry.lockout.failed(&policy, now);
            return None;
        }
        entry.lockout.succeeded(&policy);
        Some(entry.account.role)
    }

    /// Creates a session; returns (token, session id, username).
    pub(crate) fn log_in(
        &self,
        username: &str,
        password: &str,
    ) -> Result<(String, String), LoginError> {
        let mut state = self.lock();
        if !state.auth.sessions {
            return Err(LoginError::SessionsDisabled);
        }
        state.logins += 1;
        let now = self.clock.now();
        if Self::check_password(&mut state, now, username, password).is_none() {
            state.authentication_failures += 1;
            return Err(LoginError::BadCredentials);
        }
        let timeout = self.session_timeout;
        state.sessions.retain(|_, s| now < s.last_used + timeout);
        if state.sessions.len() >= self.max_sessions {
            return Err(LoginError::TooManySessions);
        }
        let token = self.new_token();
        let id = state.next_session.to_string();
        state.next_session += 1;
        state.sessions_created += 1;
        state.issued.push(token.clone());
        state.sessions.insert(
            token.clone(),
            Session {
                id: id.clone(),
                username: username.to_owned(),
                last_used: now,
            },
        );
        Ok((token, id))
    }

    fn new_token(&self) -> String {
        let mut bytes = [0u8; 24];
        // The system RNG failing is not something a simulator can recover from; a fixed
        // token would be worse, so fall back to the clock, which still makes tokens distinct.
        if self.random.fill(&mut bytes).is_err() {
            bytes[..16].copy_from_slice(&self.clock.now().as_nanos().to_le_bytes());
        }
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Checks a request's `X-Auth-Token` or `Authorization: Basic`.
    pub(crate) fn authenticate(
        &self,
        token: Option<&str>,
        authorization: Option<&str>,
    ) -> Option<Principal> {
        let mut state = self.lock();
        let now = self.clock.now();
        if let Some(token) = token {
            let timeout = self.session_timeout;
            let username = match state.sessions.get_mut(token) {
                Some(session) if now < session.last_used + timeout => {
                    session.last_used = now;
                    Some(session.username.clone())
                }
                Some(_) => {
                    state.sessions.remove(token);
                    None
                }
                None => None,
            };
            let principal = username.and_then(|username| {
                let role = state
                    .accounts
                    .iter()
                    .find(|e| e.enabled && e.account.username == username)?
                    .account
                    .role;
                Some(Principal { username, role })
            });
            if principal.is_none() {
                state.authentication_failures += 1;
            }
            return principal;
        }
        let basic = authorization
            .and_then(|value| value.strip_prefix("Basic "))
            .and_then(|encoded| {
                base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .ok()
            })
            .and_then(|bytes| String::from_utf8(bytes).ok());
        let principal = match basic {
            Some(pair) if state.auth.basic_auth => pair.split_once(':').and_then(|(u, p)| {
                Self::check_password(&mut state, now, u, p).map(|role| Principal {
                    username: u.to_owned(),
                    role,
                })
            }),
            _ => None,
        };
        if principal.is_none() && authorization.is_some() {
            state.authentication_failures += 1;
        }
        principal
    }

    /// The open sessions: (id, username).
    pub(crate) fn sessions(&self) -> Vec<(String, String)> {
        let mut sessions: Vec<_> = self
            .lock()
            .sessions
            .values()
            .map(|s| (s.id.clone(), s.username.clone()))
            .collect();
        sessions.sort_by_key(|(id, _)| id.parse::<u64>().unwrap_or(u64::MAX));
        sessions
    }

    /// Deletes the session with this id; false when there is none.
    pub(crate) fn delete_session(&self, id: &str) -> bool {
        let mut state = self.lock();
        let before = state.sessions.len();
        state.sessions.retain(|_, s| s.id != id);
        let deleted = state.sessions.len() < before;
        if deleted {
            state.sessions_deleted += 1;
        }
        deleted
    }

    /// Records a reset the service answered without changing the power (refused, or a type
    /// with no power effect).
    pub(crate) fn record_reset(&self, host: &SimHost, reset_type: &str) {
        self.lock().resets.push(ResetRecord {
            system: host.id().to_owned(),
            reset_type: reset_type.to_owned(),
        });
    }

    /// Records and applies a reset; returns a task id when the host answers asynchronously.
    pub(crate) fn reset(
        &self,
        host: &Arc<SimHost>,
        reset_type: &str,
        action: PowerAction,
    ) -> Option<u64> {
        let asynchronous = host.faults().async_reset;
        host.request(action);
        let mut state = self.lock();
        state.resets.push(ResetRecord {
            system: host.id().to_owned(),
            reset_type: reset_type.to_owned(),
        });
        if !asynchronous {
            return None;
        }
        let id = state.next_task;
        state.next_task += 1;
        state.tasks.insert(
            id,
            Task {
                id,
                host: host.clone(),
                reset_type: reset_type.to_owned(),
            },
        );
        Some(id)
    }

    /// A task by id.
    pub(crate) fn task(&self, id: u64) -> Option<Task> {
        self.lock().tasks.get(&id).cloned()
    }

    /// Sets a host's power at once (scenario set-up).
    pub fn set_power(&self, id: &str, power: Power) -> bool {
        match self.host(id) {
            Some(host) => {
                host.set_power(power);
                true
            }
            None => false,
        }
    }
}

/// Counts a request out when dropped.
pub(crate) struct InFlight<'a>(&'a RedfishService);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
