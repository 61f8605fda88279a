//! Worker threads for requests that may wait on the disk (file data and
//! directory listings).
//!
//! One thread reads requests from the kernel and answers the quick ones
//! itself (lseek, getattr, lookup, xattrs, open): a request handed from
//! thread to thread costs a wakeup, and on a virtual machine waking an idle
//! CPU costs more than the lseek. Reads and directory listings go to this
//! pool, so readers of different files do not wait on each other's I/O;
//! their replies are sent from the worker.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

pub struct Pool {
    name: &'static str,
    threads: usize,
    queue: Arc<Queue>,
    started: OnceLock<()>,
}

impl Pool {
    /// A pool of `threads` workers named `name-N`, started with the first
    /// job.
    pub fn new(name: &'static str, threads: usize) -> Pool {
        Pool {
            name,
            threads: threads.max(1),
            queue: Arc::new(Queue {
                jobs: Mutex::new(VecDeque::new()),
                ready: Condvar::new(),
            }),
            started: OnceLock::new(),
        }
    }

    fn start(&self) {
        for i in 0..self.threads {
            let q = self.queue.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("{}-{i}", self.name))
                .spawn(move || loop {
                    let job = {
                        let mut jobs = q.jobs.lock().unwrap_or_else(|e| e.into_inner());
                        loop {
                            if let Some(j) = jobs.pop_front() {
                                break j;
                            }
                            jobs = q.ready.wait(jobs).unwrap_or_else(|e| e.into_inner());
                        }
                    };
                    job();
                });
            if let Err(e) = spawned {
                crate::logging::error(&format!("starting worker thread: {e}"));
            }
        }
    }

    /// Runs `job` on a worker.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        self.started.get_or_init(|| self.start());
        self.queue
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(Box::new(job));
        self.queue.ready.notify_one();
    }
}
