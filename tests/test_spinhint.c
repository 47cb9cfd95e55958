/* test_spinhint.c - fs/spinhint.h: after which requests the request loop
 * polls the device.  Pure logic: gaps are given, not timed. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "spinhint.h"

#define W 50 /* the loop's poll window, us */

static struct spinhint h;

static void fresh(void)
{
    spinhint_init(&h);
}

TestSuite(spinhint, .init = fresh);

Test(spinhint, every_kind_of_request_is_polled_after_at_first)
{
    for (uint32_t op = 0; op < SPINHINT_OPS + 3; op++)
        cr_expect(spinhint_poll(&h, op), "opcode %u not polled after at first", op);
    cr_expect(spinhint_poll(&h, UINT32_MAX));
}

Test(spinhint, two_misses_stop_the_polls_after_that_kind_only)
{
    spinhint_learn(&h, 18, 400, true, W); /* RELEASE, the next came 400 us later */
    cr_expect(spinhint_poll(&h, 18), "one miss must not stop the polls");
    spinhint_learn(&h, 18, 400, true, W);
    cr_expect_not(spinhint_poll(&h, 18), "two misses must stop the polls");
    cr_expect(spinhint_poll(&h, 1), "another opcode must keep its polls");
}

Test(spinhint, two_hits_bring_the_polls_back)
{
    for (int i = 0; i < 5; i++)
        spinhint_learn(&h, 18, 1000, false, W);
    cr_assert_not(spinhint_poll(&h, 18));
    spinhint_learn(&h, 18, 10, false, W);
    cr_expect_not(spinhint_poll(&h, 18), "one hit after many misses must not poll yet");
    spinhint_learn(&h, 18, 10, false, W);
    cr_expect(spinhint_poll(&h, 18), "two hits must bring the polls back");
}

Test(spinhint, counters_saturate)
{
    for (int i = 0; i < 300; i++) /* would wrap a uint8_t without saturation */
        spinhint_learn(&h, 3, 1, true, W);
    spinhint_learn(&h, 3, 500, true, W);
    spinhint_learn(&h, 3, 500, true, W);
    cr_expect_not(spinhint_poll(&h, 3), "hits must not pile up past the counter's top");
    for (int i = 0; i < 300; i++)
        spinhint_learn(&h, 3, 500, true, W);
    spinhint_learn(&h, 3, 1, true, W);
    spinhint_learn(&h, 3, 1, true, W);
    cr_expect(spinhint_poll(&h, 3), "misses must not pile up past the counter's bottom");
}

Test(spinhint, a_thread_that_slept_gets_a_wider_window)
{
    int64_t gap = W + W / 2; /* past the window, within the wake-up allowance */
    spinhint_learn(&h, 15, gap, true, W);
    spinhint_learn(&h, 15, gap, true, W);
    cr_expect_not(spinhint_poll(&h, 15), "polled: a request after the window is a miss");
    spinhint_learn(&h, 15, gap, false, W);
    spinhint_learn(&h, 15, gap, false, W);
    cr_expect(spinhint_poll(&h, 15), "slept: the same gap includes the wake-up, a hit");
    spinhint_learn(&h, 15, W * SPINHINT_SLEPT_FACTOR + 1, false, W);
    spinhint_learn(&h, 15, W * SPINHINT_SLEPT_FACTOR + 1, false, W);
    cr_expect_not(spinhint_poll(&h, 15), "slept: past the allowance is a miss");
}

Test(spinhint, opcodes_past_the_table_share_its_last_slot)
{
    spinhint_learn(&h, UINT32_MAX, 900, true, W);
    spinhint_learn(&h, 4000, 900, true, W);
    cr_expect_not(spinhint_poll(&h, SPINHINT_OPS - 1));
    cr_expect_not(spinhint_poll(&h, 70));
    cr_expect(spinhint_poll(&h, SPINHINT_OPS - 2), "the slot below must be untouched");
}
