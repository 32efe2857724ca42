//! The runner's side of the child process protocol (README, "The child process protocol"): a
//! process of this same binary (`dlock-conformance child`) holding a lease, asked in lines and
//! stopped and continued with signals.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child as Process, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

use crate::kinds::Kind;

/// How long the child has for each answer (a stopped child answers once continued).
const ANSWER: Duration = Duration::from_secs(30);

/// A running child.
pub struct Child {
    pid: i32,
    talk: Mutex<Talk>,
    process: Mutex<Process>,
}

struct Talk {
    requests: ChildStdin,
    answers: Lines<BufReader<ChildStdout>>,
}

/// What went wrong asking the child: its answer was an error of the scenarios' kinds, or the
/// protocol broke.
pub enum Asked {
    Error(Kind),
    Broken(String),
}

impl Child {
    /// Starts the child on `url`, behind a transaction pooler if `pooler`; waits for `ready`.
    pub async fn start(url: &str, pooler: bool) -> Result<Child, String> {
        let program = std::env::current_exe().map_err(|e| format!("cannot find the runner's binary: {e}"))?;
        let mut command = Command::new(program);
        command
            .arg("child")
            .env("DLOCK_CONFORMANCE_CHILD_DSN", url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if pooler {
            command.env("DLOCK_CONFORMANCE_CHILD_POOLER", "transaction");
        } else {
            command.env_remove("DLOCK_CONFORMANCE_CHILD_POOLER");
        }
        let mut process = command.spawn().map_err(|e| format!("cannot start the child: {e}"))?;
        let requests = process.stdin.take().ok_or("the child has no stdin")?;
        let answers = BufReader::new(process.stdout.take().ok_or("the child has no stdout")?).lines();
        let mut talk = Talk { requests, answers };
        let hello = talk.next().await?;
        let pid = hello
            .strip_prefix("ready ")
            .and_then(|pid| pid.trim().parse().ok())
            .ok_or_else(|| format!("the child said {hello:?} instead of ready"))?;
        Ok(Child { pid, talk: Mutex::new(talk), process: Mutex::new(process) })
    }

    /// The child's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `request`; the value of an `ok` answer.
    pub async fn ask(&self, request: &str) -> Result<String, Asked> {
        let mut talk = self.talk.lock().await;
        talk.send(request).await.map_err(Asked::Broken)?;
        let answer = talk.next().await.map_err(Asked::Broken)?;
        let words: Vec<&str> = answer.split(' ').collect();
        match words.as_slice() {
            ["ok", value] => Ok((*value).to_owned()),
            ["error", kind, sqlstate] => {
                let sqlstate = (*sqlstate != "-").then_some(*sqlstate);
                Err(Asked::Error(Kind::new(kind, sqlstate, format!("the child answered {answer:?}"))))
            }
            _ => Err(Asked::Broken(format!("the child answered {answer:?} to {request:?}"))),
        }
    }

    /// Sends `STOP` or `CONT`.
    pub fn signal(&self, name: &str) -> Result<(), String> {
        let signal = match name {
            "STOP" => libc::SIGSTOP,
            "CONT" => libc::SIGCONT,
            other => return Err(format!("no signal {other}")),
        };
        // SAFETY: kill(2) with the pid of a child this runner started and has not reaped.
        if unsafe { libc::kill(self.pid, signal) } != 0 {
            return Err(format!("kill -{name} {}: {}", self.pid, std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Asks it to quit and waits for it to exit.
    pub async fn quit(&self) -> Result<(), String> {
        match self.ask("quit").await {
            Ok(bye) if bye == "bye" => {}
            Ok(other) => return Err(format!("the child answered quit with {other:?}")),
            Err(Asked::Error(kind)) => return Err(kind.message),
            Err(Asked::Broken(why)) => return Err(why),
        }
        let mut process = self.process.lock().await;
        match tokio::time::timeout(Duration::from_secs(10), process.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(format!("the child exited with {status}")),
            Ok(Err(e)) => Err(format!("waiting for the child: {e}")),
            Err(_) => Err("the child did not exit after quit".into()),
        }
    }

    /// Ends it however it is (continued first, so that a stopped child can die).
    pub async fn kill(&self) {
        drop(self.signal("CONT"));
        let mut process = self.process.lock().await;
        drop(process.kill().await);
    }
}

impl Talk {
    async fn send(&mut self, request: &str) -> Result<(), String> {
        let line = format!("{request}\n");
        let sent = async {
            self.requests.write_all(line.as_bytes()).await?;
            self.requests.flush().await
        };
        sent.await.map_err(|e| format!("cannot write to the child: {e}"))
    }

    async fn next(&mut self) -> Result<String, String> {
        match tokio::time::timeout(ANSWER, self.answers.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => Err("the child ended".into()),
            Ok(Err(e)) => Err(format!("cannot read from the child: {e}")),
            Err(_) => Err(format!("the child did not answer within {} s", ANSWER.as_secs())),
        }
    }
}
