/* SPDX-License-Identifier: ISC */
/*
 * The character and calendar helpers every layer shares (shm/text.h, shm/clock.h): one copy
 * each, checked here against values worked out by hand.
 */
#include "clock.h"
#include "text.h"

#include <criterion/criterion.h>

TestSuite(text, .timeout = 30);

Test(text, a_hex_digit_is_read_in_either_case_and_nothing_else_is_one)
{
    const char *digits = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        cr_expect_eq(mg_hex_digit(digits[i]), i, "%c", digits[i]);
        cr_expect_eq(mg_hex_digit(digits[i] >= 'a' ? digits[i] - 32 : digits[i]), i);
    }
    for (int c = 0; c < 256; c++) {
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (!hex)
            cr_expect_eq(mg_hex_digit(c), -1, "character %d", c);
    }
}

Test(text, days_since_1970_give_the_civil_date)
{
    static const struct {
        int64_t days;
        int64_t year;
        int month, day;
    } cases[] = {
        {0, 1970, 1, 1},       {-1, 1969, 12, 31},   {59, 1970, 3, 1},
        {10956, 1999, 12, 31}, {11016, 2000, 2, 29}, {11017, 2000, 3, 1},
        {20793, 2026, 12, 6},  {-719468, 0, 3, 1},   {2932896, 9999, 12, 31},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t year;
        int month, day;
        mg_civil_from_days(cases[i].days, &year, &month, &day);
        cr_expect(year == cases[i].year && month == cases[i].month && day == cases[i].day,
                  "day %lld: %lld-%02d-%02d, expected %lld-%02d-%02d", (long long)cases[i].days,
                  (long long)year, month, day, (long long)cases[i].year, cases[i].month,
                  cases[i].day);
    }
}
