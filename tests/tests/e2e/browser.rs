//! Headless Chromium through chromedriver, for the tests that look at pages as a person
//! would; such a test is skipped, with a message, where either is not installed
//! (`apt-get install chromium chromium-driver`).

use std::{
    future::Future,
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use fantoccini::{Client, ClientBuilder, Locator};
use futures::FutureExt;
use paysaga_e2e::{ServiceKind, Stack};
use sqlx::PgPool;

/// A program on `PATH` (or at the path an environment variable names).
fn program(var: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var).map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// Where chromedriver and Chromium are installed.
pub struct Installed {
    chromedriver: PathBuf,
    chromium: PathBuf,
}

impl Installed {
    /// Both programs, else `None` after saying that `test` is skipped and why.
    pub fn find(test: &str) -> Option<Self> {
        let found = program("CHROMEDRIVER", &["chromedriver"]).zip(program(
            "CHROME_BIN",
            &["chromium", "chromium-browser", "google-chrome"],
        ));
        if found.is_none() {
            eprintln!("SKIPPED {test}: chromium or chromedriver not installed (apt-get install chromium chromium-driver)");
        }
        found.map(|(chromedriver, chromium)| Self {
            chromedriver,
            chromium,
        })
    }

    /// A browser session (1360×1000, headless), with `extra_args` for Chromium.
    pub async fn open(&self, extra_args: &[&str]) -> anyhow::Result<Session> {
        let driver = ChromeDriver::start(&self.chromedriver).await?;
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1360,1000",
            "--hide-scrollbars",
        ];
        args.extend_from_slice(extra_args);
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": self.chromium, "args": args }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await?;
        Ok(Session {
            client,
            _driver: driver,
        })
    }
}

/// Chromium's flags for a browser with no route out: every name but 127.0.0.1 fails
/// to resolve and every connection that is not to loopback goes to a proxy that is not
/// there (loopback always bypasses a proxy in Chromium).
pub const OFFLINE: [&str; 2] = [
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
];

/// An open browser and the chromedriver behind it.
pub struct Session {
    pub client: Client,
    _driver: ChromeDriver,
}

impl Session {
    /// Ends the browser session, then chromedriver.
    pub async fn close(self) -> anyhow::Result<()> {
        self.client.close().await?;
        Ok(())
    }
}

/// A browser on a stack's console, with what a browser test checks it against: every
/// step of such a test works with these.
pub struct Visit<'a> {
    pub client: Client,
    /// The console's address (`<orchestrator>/console`).
    pub console: String,
    /// The stack's PostgreSQL, where each effect is checked.
    pub pool: &'a PgPool,
    /// Where the screenshots go.
    pub shots: &'a Path,
}

impl Installed {
    /// Runs `browse` on `stack`'s console in a fresh browser session and closes it
    /// whatever happens: a failed assertion inside is raised again after the clean-up, and
    /// a failure prints where the stack's logs and the screenshots are.
    pub async fn browse<'a, F, Fut>(
        &self,
        stack: &Stack,
        pool: &'a PgPool,
        shots: &'a Path,
        browse: F,
    ) -> anyhow::Result<()>
    where
        F: FnOnce(Visit<'a>) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let session = self.open(&[]).await?;
        let visit = Visit {
            client: session.client.clone(),
            console: format!("{}/console", stack.url(ServiceKind::Orchestrator)),
            pool,
            shots,
        };
        let outcome = AssertUnwindSafe(browse(visit)).catch_unwind().await;
        let closed = session.close().await;
        let failed = |what: &dyn std::fmt::Display| {
            eprintln!("logs:\n{}", stack.log_paths());
            eprintln!("screenshots: {}", shots.display());
            eprintln!("{what}");
        };
        match outcome {
            Err(panic) => {
                failed(&"the browser test panicked");
                std::panic::resume_unwind(panic)
            }
            Ok(Err(e)) => {
                failed(&format_args!("{e:#}"));
                Err(e)
            }
            Ok(Ok(())) => closed,
        }
    }
}

/// Types `text` into the field `css` names.
pub async fn type_into(client: &Client, css: &str, text: &str) -> anyhow::Result<()> {
    client
        .find(Locator::Css(css))
        .await?
        .send_keys(text)
        .await?;
    Ok(())
}

/// Clicks the element `css` names.
pub async fn click(client: &Client, css: &str) -> anyhow::Result<()> {
    client.find(Locator::Css(css)).await?.click().await?;
    Ok(())
}

/// Sends the confirmation form on the page (`#confirm`) and waits for the page it leads
/// to, which says what was done (`#flash`).
pub async fn confirm(client: &Client) -> anyhow::Result<()> {
    click(client, "#confirm").await?;
    client.wait().for_element(Locator::Css("#flash")).await?;
    Ok(())
}

/// Signs a person in to the console at `console` through its two steps: the password,
/// then a code; waits for the drop page.
pub async fn sign_in(
    client: &Client,
    console: &str,
    email: &str,
    password: &str,
    code: &str,
) -> anyhow::Result<()> {
    client.goto(&format!("{console}/login")).await?;
    type_into(client, "#email", email).await?;
    type_into(client, "#password", password).await?;
    click(client, "#sign-in").await?;
    client.wait().for_element(Locator::Css("#code")).await?;
    type_into(client, "#code", code).await?;
    click(client, "#verify").await?;
    client.wait().for_element(Locator::Css("#live")).await?;
    Ok(())
}

/// Where the console tests' screenshots go, made if need be: the directory
/// `CONSOLE_SCREENSHOT_DIR` names (the documentation's are made there), else the
/// harness's log directory `<label>-…`.
pub fn screenshot_dir(label: &str) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("CONSOLE_SCREENSHOT_DIR") {
        Some(d) => PathBuf::from(d),
        None => paysaga_e2e::binaries::log_dir(label)?,
    };
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub async fn screenshot(client: &Client, dir: &Path, name: &str) -> anyhow::Result<()> {
    let png = client.screenshot().await?;
    std::fs::write(dir.join(format!("{name}.png")), png)?;
    Ok(())
}

/// chromedriver as a child process, stopped (with its browsers) when dropped.
struct ChromeDriver {
    child: Child,
    port: u16,
}

impl ChromeDriver {
    async fn start(program: &Path) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(program)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let driver = ChromeDriver { child, port };
        let http = reqwest::Client::new();
        paysaga_common::testkit::until_some(
            "chromedriver ready",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                let status = http
                    .get(format!("http://127.0.0.1:{port}/status"))
                    .send()
                    .await;
                status.is_ok_and(|r| r.status().is_success()).then_some(())
            },
        )
        .await;
        Ok(driver)
    }
}

/// How long chromedriver may take to end its browsers and exit after SIGTERM.
const STOP_WITHIN: Duration = Duration::from_secs(1);

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        // SIGTERM first: chromedriver then ends the browsers it started. Its exit itself
        // is waited for (on a thread, as `wait` blocks); one that has not come within
        // STOP_WITHIN is forced with SIGKILL, which ends that wait too.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let child = &mut self.child;
        std::thread::scope(|s| {
            let (exited, exit) = std::sync::mpsc::channel();
            s.spawn(move || {
                let _ = child.wait();
                let _ = exited.send(());
            });
            if exit.recv_timeout(STOP_WITHIN).is_err() {
                let _ = kill(pid, Signal::SIGKILL);
            }
        });
    }
}
