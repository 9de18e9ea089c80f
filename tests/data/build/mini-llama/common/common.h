#pragma once
void common_init(void);
