/* SPDX-License-Identifier: ISC */
/*
 * The shared lock's unlock makes a wake-up system call only when a waiter sleeps (issue 12,
 * item 5): the waiter count beside the owner's pid, as nginx's ngx_shmtx keeps it.
 */
#include "harness.h"

#include "lock.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(lock, .timeout = 60);

Test(lock, an_uncontended_unlock_makes_no_wake_up_call)
{
    struct mg_lock l = {0};
    uint64_t before = mg_lock_wake_calls();
    for (int i = 0; i < 1000; i++) {
        mg_lock_acquire(&l, getpid());
        mg_lock_release(&l, getpid());
    }
    cr_expect_eq(mg_lock_wake_calls(), before, "%llu wake-up calls without a waiter",
                 (unsigned long long)(mg_lock_wake_calls() - before));
    cr_expect_eq(atomic_load(&l.waiters), 0);
}

static bool someone_sleeps(void *arg)
{
    return atomic_load(&((struct mg_lock *)arg)->waiters) > 0;
}

/* Another process waits for the lock past its spins and sleeps: the unlock counts it and
 * wakes it, and it gets the lock. */
Test(lock, an_unlock_wakes_a_process_asleep_on_the_lock)
{
    struct mg_lock *l =
        mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(l != MAP_FAILED);
    mg_lock_acquire(l, getpid());
    pid_t child = fork();
    if (child == 0) {
        mg_lock_acquire(l, getpid());
        mg_lock_release(l, getpid());
        _exit(0);
    }
    cr_assert(mg_test_wait_until(someone_sleeps, l, 20000, 1), "the other process never slept");
    uint64_t before = mg_lock_wake_calls();
    mg_lock_release(l, getpid());
    cr_expect_eq(mg_lock_wake_calls(), before + 1, "the unlock did not wake the sleeper");
    int status = -1;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_expect_eq(atomic_load(&l->owner_pid), 0);
    cr_expect_eq(atomic_load(&l->waiters), 0);
    munmap(l, sizeof *l);
}
